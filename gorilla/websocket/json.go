package websocket

import (
	"encoding/json"
	"io"
)

// WriteJSON sends the JSON encoding of v as a text message.
func (c *Conn) WriteJSON(v interface{}) error {
	w, err := c.NextWriter(TextMessage)
	if err != nil {
		return err
	}
	err1 := json.NewEncoder(w).Encode(v)
	err2 := w.Close()
	if err1 != nil {
		return err1
	}
	return err2
}

// ReadJSON reads the next message and decodes its JSON into v. An empty
// message is io.ErrUnexpectedEOF.
func (c *Conn) ReadJSON(v interface{}) error {
	_, r, err := c.NextReader()
	if err != nil {
		return err
	}
	err = json.NewDecoder(r).Decode(v)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// WriteJSON is c.WriteJSON(v). Deprecated in gorilla: use Conn.WriteJSON.
func WriteJSON(c *Conn, v interface{}) error { return c.WriteJSON(v) }

// ReadJSON is c.ReadJSON(v). Deprecated in gorilla: use Conn.ReadJSON.
func ReadJSON(c *Conn, v interface{}) error { return c.ReadJSON(v) }
