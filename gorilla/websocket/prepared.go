package websocket

import (
	"bytes"

	"github.com/rallyws/rally"
)

// PreparedMessage is a message framed once, to send to many connections
// with WritePreparedMessage (a broadcast) without framing it again. It is
// safe for concurrent use.
type PreparedMessage struct {
	typ  int
	data []byte // control messages
	pm   *rally.PreparedMessage
}

// NewPreparedMessage prepares a copy of data as a message of messageType.
func NewPreparedMessage(messageType int, data []byte) (*PreparedMessage, error) {
	switch messageType {
	case TextMessage, BinaryMessage:
		pm, err := rally.NewPreparedMessage(rally.MessageType(messageType), data)
		if err != nil {
			return nil, err
		}
		return &PreparedMessage{typ: messageType, pm: pm}, nil
	case CloseMessage, PingMessage, PongMessage:
		if len(data) > 125 {
			return nil, errInvalidControlFrame
		}
		return &PreparedMessage{typ: messageType, data: bytes.Clone(data)}, nil
	}
	return nil, errBadWriteOpCode
}

// WritePreparedMessage sends pm, as WriteMessage would its payload.
func (c *Conn) WritePreparedMessage(pm *PreparedMessage) error {
	if pm.pm == nil {
		return c.WriteControl(pm.typ, pm.data, c.wdl.get())
	}
	if err := c.writeState(); err != nil {
		return err
	}
	c.writer.end()
	return c.writeResult(c.rc.WritePrepared(c.wdl.context(), pm.pm))
}
