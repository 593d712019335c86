// Command filewatch is gorilla's filewatch example on rally: a page that
// shows a file and updates itself when the file changes.
//
//	filewatch -addr localhost:8080 FILE
package main

import (
	"flag"
	"html/template"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

const (
	writeWait  = 10 * time.Second  // to write the file to the client
	pongWait   = 60 * time.Second  // to hear from the client
	pingPeriod = pongWait * 9 / 10 // pings keep pongs coming
	filePeriod = 10 * time.Second  // how often the file is looked at
)

var (
	addr     = flag.String("addr", ":8080", "http service address")
	period   = flag.Duration("period", filePeriod, "how often the file is looked at")
	filename string
	upgrader = websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024}
)

// readFileIfModified returns the file's content if it changed since
// lastMod, and its modification time.
func readFileIfModified(lastMod time.Time) ([]byte, time.Time, error) {
	fi, err := os.Stat(filename)
	if err != nil {
		return nil, lastMod, err
	}
	if !fi.ModTime().After(lastMod) {
		return nil, lastMod, nil
	}
	p, err := os.ReadFile(filename)
	if err != nil {
		return nil, fi.ModTime(), err
	}
	return p, fi.ModTime(), nil
}

// reader reads (and drops) what the client sends, so that its pongs are
// handled, until the connection ends.
func reader(ws *websocket.Conn) {
	defer ws.Close()
	ws.SetReadLimit(512)
	ws.SetReadDeadline(time.Now().Add(pongWait))
	ws.SetPongHandler(func(string) error { ws.SetReadDeadline(time.Now().Add(pongWait)); return nil })
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			return
		}
	}
}

// writer sends the file when it changes, and pings.
func writer(ws *websocket.Conn, lastMod time.Time) {
	pingTicker := time.NewTicker(pingPeriod)
	fileTicker := time.NewTicker(*period)
	defer func() {
		pingTicker.Stop()
		fileTicker.Stop()
		ws.Close()
	}()
	for {
		select {
		case <-fileTicker.C:
			p, mod, err := readFileIfModified(lastMod)
			if err != nil {
				p = []byte(err.Error())
			}
			lastMod = mod
			if p != nil {
				ws.SetWriteDeadline(time.Now().Add(writeWait))
				if err := ws.WriteMessage(websocket.TextMessage, p); err != nil {
					return
				}
			}
		case <-pingTicker.C:
			ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err := ws.WriteMessage(websocket.PingMessage, []byte{}); err != nil {
				return
			}
		}
	}
}

func serveWs(w http.ResponseWriter, r *http.Request) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		log.Println(err)
		return
	}
	var lastMod time.Time
	if n, err := strconv.ParseInt(r.FormValue("lastMod"), 16, 64); err == nil {
		lastMod = time.Unix(0, n)
	}
	go writer(ws, lastMod)
	reader(ws)
}

func serveHome(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.Error(w, "Not found", http.StatusNotFound)
		return
	}
	p, lastMod, err := readFileIfModified(time.Time{})
	if err != nil {
		p = []byte(err.Error())
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	homeTemplate.Execute(w, struct {
		Host, Data, LastMod string
	}{r.Host, string(p), strconv.FormatInt(lastMod.UnixNano(), 16)})
}

func main() {
	flag.Parse()
	if flag.NArg() != 1 {
		log.Fatal("filename not specified")
	}
	filename = flag.Arg(0)
	http.HandleFunc("/", serveHome)
	http.HandleFunc("/ws", serveWs)
	log.Fatal(http.ListenAndServe(*addr, nil))
}

var homeTemplate = template.Must(template.New("").Parse(`<!DOCTYPE html>
<html lang="en"><head><title>WebSocket Example</title></head>
<body>
<pre id="fileData">{{.Data}}</pre>
<script>
const data = document.getElementById("fileData");
const conn = new WebSocket("ws://{{.Host}}/ws?lastMod={{.LastMod}}");
conn.onclose = () => { data.textContent = "Connection closed"; };
conn.onmessage = e => { data.textContent = e.data; };
</script>
</body></html>
`))
