// Command command is gorilla's command example on rally: it runs a program
// for each browser that connects, sends the program's output lines as
// messages, and writes the browser's messages to the program's input.
//
//	command -addr localhost:8080 PROGRAM [ARGS...]
package main

import (
	"bufio"
	_ "embed"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

var addr = flag.String("addr", "127.0.0.1:8080", "http service address")

const (
	writeWait        = 10 * time.Second  // to write a message
	maxMessageSize   = 8192              // the largest message accepted
	pongWait         = 60 * time.Second  // to hear from the browser
	pingPeriod       = pongWait * 9 / 10 // pings keep pongs coming
	closeGracePeriod = 10 * time.Second  // for the program to end after its input closed
)

//go:embed home.html
var homePage []byte

// pumpStdin writes the browser's messages, one per line, to the program.
func pumpStdin(ws *websocket.Conn, w io.Writer) {
	defer ws.Close()
	ws.SetReadLimit(maxMessageSize)
	ws.SetReadDeadline(time.Now().Add(pongWait))
	ws.SetPongHandler(func(string) error { ws.SetReadDeadline(time.Now().Add(pongWait)); return nil })
	for {
		_, message, err := ws.ReadMessage()
		if err != nil {
			return
		}
		message = append(message, '\n')
		if _, err := w.Write(message); err != nil {
			return
		}
	}
}

// pumpStdout sends the program's output lines to the browser, then closes
// the connection cleanly.
func pumpStdout(ws *websocket.Conn, r io.Reader, done chan struct{}) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		ws.SetWriteDeadline(time.Now().Add(writeWait))
		if err := ws.WriteMessage(websocket.TextMessage, s.Bytes()); err != nil {
			ws.Close()
			break
		}
	}
	if s.Err() != nil {
		log.Println("scan:", s.Err())
	}
	close(done)
	ws.SetWriteDeadline(time.Now().Add(writeWait))
	ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	time.Sleep(closeGracePeriod) // the browser's answer arrives meanwhile
	ws.Close()
}

// ping keeps the browser's pongs coming until done.
func ping(ws *websocket.Conn, done chan struct{}) {
	ticker := time.NewTicker(pingPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			if err := ws.WriteControl(websocket.PingMessage, []byte{}, time.Now().Add(writeWait)); err != nil {
				log.Println("ping:", err)
			}
		case <-done:
			return
		}
	}
}

func internalError(ws *websocket.Conn, msg string, err error) {
	log.Println(msg, err)
	ws.WriteMessage(websocket.TextMessage, []byte("Internal server error."))
}

var upgrader = websocket.Upgrader{}

func serveWs(w http.ResponseWriter, r *http.Request) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		log.Println("upgrade:", err)
		return
	}
	defer ws.Close()

	outr, outw, err := os.Pipe()
	if err != nil {
		internalError(ws, "stdout:", err)
		return
	}
	defer outr.Close()
	defer outw.Close()
	inr, inw, err := os.Pipe()
	if err != nil {
		internalError(ws, "stdin:", err)
		return
	}
	defer inr.Close()
	defer inw.Close()

	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inr, outw, outw
	if err := cmd.Start(); err != nil {
		internalError(ws, "start:", err)
		return
	}
	inr.Close()
	outw.Close()

	stdoutDone := make(chan struct{})
	go pumpStdout(ws, outr, stdoutDone)
	go ping(ws, stdoutDone)
	pumpStdin(ws, inw)

	// The browser went away: close the program's input, and stop it if it
	// does not end by itself.
	inw.Close()
	select {
	case <-stdoutDone:
	case <-time.After(time.Second):
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-stdoutDone:
		case <-time.After(closeGracePeriod):
			cmd.Process.Kill()
			<-stdoutDone
		}
	}
	if err := cmd.Wait(); err != nil {
		log.Println("wait:", err)
	}
}

func serveHome(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.Error(w, "Not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(homePage)
}

func main() {
	flag.Parse()
	if flag.NArg() < 1 {
		log.Fatal("must specify at least one argument")
	}
	http.HandleFunc("/", serveHome)
	http.HandleFunc("/ws", serveWs)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
