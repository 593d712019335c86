// Command autobahn is gorilla's autobahn example on rally: echo servers
// for the Autobahn test suite (or `rally conform`), one per way of reading
// and writing a message. gorilla's example checks UTF-8 itself with a
// validating reader; here the package does (failing fast with 1007), so
// the handlers only echo.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"

	"github.com/rallyws/rally/gorilla/websocket"
)

var addr = flag.String("addr", ":9000", "http service address")

var upgrader = websocket.Upgrader{
	ReadBufferSize:    4096,
	WriteBufferSize:   4096,
	EnableCompression: true,
	CheckOrigin:       func(*http.Request) bool { return true },
}

// echoCopy streams each message back as it arrives: NextReader into
// NextWriter, fragment by fragment. full copies with io.Copy, otherwise
// through a small buffer.
func echoCopy(w http.ResponseWriter, r *http.Request, full bool) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		log.Println("upgrade:", err)
		return
	}
	defer conn.Close()
	for {
		mt, rd, err := conn.NextReader()
		if err != nil {
			if websocket.IsUnexpectedCloseError(err, websocket.CloseNormalClosure, websocket.CloseNoStatusReceived) {
				log.Println("NextReader:", err)
			}
			return
		}
		wr, err := conn.NextWriter(mt)
		if err != nil {
			log.Println("NextWriter:", err)
			return
		}
		if full {
			_, err = io.Copy(wr, rd)
		} else {
			_, err = io.CopyBuffer(struct{ io.Writer }{wr}, struct{ io.Reader }{rd}, make([]byte, 4096))
		}
		if err != nil {
			log.Println("Copy:", err)
			return
		}
		if err := wr.Close(); err != nil {
			log.Println("Close:", err)
			return
		}
	}
}

// echoReadAll reads each message whole, then sends it back with a writer,
// WriteMessage, or a PreparedMessage.
func echoReadAll(w http.ResponseWriter, r *http.Request, how byte) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		log.Println("upgrade:", err)
		return
	}
	defer conn.Close()
	for {
		mt, b, err := conn.ReadMessage()
		if err != nil {
			if websocket.IsUnexpectedCloseError(err, websocket.CloseNormalClosure, websocket.CloseNoStatusReceived) {
				log.Println("ReadMessage:", err)
			}
			return
		}
		switch how {
		case 'm':
			err = conn.WriteMessage(mt, b)
		case 'p':
			var pm *websocket.PreparedMessage
			if pm, err = websocket.NewPreparedMessage(mt, b); err == nil {
				err = conn.WritePreparedMessage(pm)
			}
		default:
			var wr io.WriteCloser
			if wr, err = conn.NextWriter(mt); err == nil {
				if _, err = wr.Write(b); err == nil {
					err = wr.Close()
				}
			}
		}
		if err != nil {
			log.Println("write:", err)
			return
		}
	}
}

func serveHome(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.Error(w, "Not found.", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	io.WriteString(w, "<html><body>Echo Server</body></html>")
}

func main() {
	flag.Parse()
	http.HandleFunc("/", serveHome)
	http.HandleFunc("/c", func(w http.ResponseWriter, r *http.Request) { echoCopy(w, r, false) })
	http.HandleFunc("/f", func(w http.ResponseWriter, r *http.Request) { echoCopy(w, r, true) })
	http.HandleFunc("/r", func(w http.ResponseWriter, r *http.Request) { echoReadAll(w, r, 'r') })
	http.HandleFunc("/m", func(w http.ResponseWriter, r *http.Request) { echoReadAll(w, r, 'm') })
	http.HandleFunc("/p", func(w http.ResponseWriter, r *http.Request) { echoReadAll(w, r, 'p') })
	log.Fatal(http.ListenAndServe(*addr, nil))
}
