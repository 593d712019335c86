// Command server is gorilla's echo example server on rally: only the
// import path differs from a gorilla program. It echoes every message on
// /echo and serves a page that talks to it on /.
package main

import (
	"flag"
	"html/template"
	"log"
	"net/http"

	"github.com/rallyws/rally/gorilla/websocket"
)

var addr = flag.String("addr", "localhost:8080", "http service address")

var upgrader = websocket.Upgrader{} // defaults: same-origin browsers only

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		log.Print("upgrade:", err)
		return
	}
	defer c.Close()
	for {
		mt, message, err := c.ReadMessage()
		if err != nil {
			log.Println("read:", err)
			break
		}
		log.Printf("recv: %s", message)
		if err := c.WriteMessage(mt, message); err != nil {
			log.Println("write:", err)
			break
		}
	}
}

func home(w http.ResponseWriter, r *http.Request) {
	homeTemplate.Execute(w, "ws://"+r.Host+"/echo")
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	http.HandleFunc("/echo", echo)
	http.HandleFunc("/", home)
	log.Fatal(http.ListenAndServe(*addr, nil))
}

var homeTemplate = template.Must(template.New("").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>echo</title></head>
<body>
<p>Open connects, Send sends the text, Close closes. Messages appear below.</p>
<form><button id="open">Open</button> <button id="close">Close</button>
<input id="input" type="text" value="Hello world!"> <button id="send">Send</button></form>
<div id="output"></div>
<script>
const output = document.getElementById("output");
const input = document.getElementById("input");
let ws;
function print(s) { const d = document.createElement("div"); d.textContent = s; output.appendChild(d); }
document.getElementById("open").onclick = () => {
	if (ws) return false;
	ws = new WebSocket({{.}});
	ws.onopen = () => print("OPEN");
	ws.onclose = () => { print("CLOSE"); ws = null; };
	ws.onmessage = e => print("RESPONSE: " + e.data);
	ws.onerror = () => print("ERROR");
	return false;
};
document.getElementById("send").onclick = () => {
	if (!ws) return false;
	print("SEND: " + input.value);
	ws.send(input.value);
	return false;
};
document.getElementById("close").onclick = () => { if (ws) ws.close(); return false; };
</script>
</body></html>
`))
