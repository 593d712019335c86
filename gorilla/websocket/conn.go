package websocket

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/frame"
)

// The message types, as gorilla numbers them (the RFC 6455 opcodes).
const (
	// TextMessage is a text data message (UTF-8).
	TextMessage = 1
	// BinaryMessage is a binary data message.
	BinaryMessage = 2
	// CloseMessage is a close control message; its payload is made by
	// FormatCloseMessage.
	CloseMessage = 8
	// PingMessage is a ping control message.
	PingMessage = 9
	// PongMessage is a pong control message.
	PongMessage = 10
)

// The close codes of RFC 6455 section 7.4.1 (and the IANA registry).
const (
	CloseNormalClosure           = 1000
	CloseGoingAway               = 1001
	CloseProtocolError           = 1002
	CloseUnsupportedData         = 1003
	CloseNoStatusReceived        = 1005
	CloseAbnormalClosure         = 1006
	CloseInvalidFramePayloadData = 1007
	ClosePolicyViolation         = 1008
	CloseMessageTooBig           = 1009
	CloseMandatoryExtension      = 1010
	CloseInternalServerErr       = 1011
	CloseServiceRestart          = 1012
	CloseTryAgainLater           = 1013
	CloseTLSHandshake            = 1015
)

// ErrCloseSent is returned by writes after a close message was sent (by
// the application, or as the answer to the peer's close).
var ErrCloseSent = errors.New("websocket: close sent")

// ErrReadLimit is returned by reads when a message is longer than the
// limit set with SetReadLimit; the peer was sent close 1009.
var ErrReadLimit = errors.New("websocket: read limit exceeded")

var (
	errBadWriteOpCode      = errors.New("websocket: bad write message type")
	errWriteClosed         = errors.New("websocket: write closed")
	errInvalidControlFrame = errors.New("websocket: invalid control frame")
	errUnsolicitedPong     = errors.New("websocket: pongs are sent only in answer to pings, and each ping is answered automatically")
)

// CloseError is how a connection's end is reported by the read methods:
// the peer's close code and reason, CloseAbnormalClosure when the
// connection ended without a close frame, or the code this side sent when
// the peer broke the protocol (1002, 1007, 1009).
type CloseError struct {
	// Code is the close code (see the Close... constants).
	Code int
	// Text is the close reason.
	Text string
}

// Error returns "websocket: close CODE (meaning): TEXT".
func (e *CloseError) Error() string {
	b := make([]byte, 0, 64+len(e.Text))
	b = append(b, "websocket: close "...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	if m := closeMeaning[e.Code]; m != "" {
		b = append(b, " ("...)
		b = append(b, m...)
		b = append(b, ')')
	}
	if e.Text != "" {
		b = append(b, ": "...)
		b = append(b, e.Text...)
	}
	return string(b)
}

var closeMeaning = map[int]string{
	CloseNormalClosure:           "normal",
	CloseGoingAway:               "going away",
	CloseProtocolError:           "protocol error",
	CloseUnsupportedData:         "unsupported data",
	CloseNoStatusReceived:        "no status",
	CloseAbnormalClosure:         "abnormal closure",
	CloseInvalidFramePayloadData: "invalid payload data",
	ClosePolicyViolation:         "policy violation",
	CloseMessageTooBig:           "message too big",
	CloseMandatoryExtension:      "mandatory extension missing",
	CloseInternalServerErr:       "internal server error",
	CloseTLSHandshake:            "TLS handshake error",
}

// IsCloseError reports whether err is a *CloseError with one of codes.
func IsCloseError(err error, codes ...int) bool {
	var ce *CloseError
	if !errors.As(err, &ce) {
		return false
	}
	for _, code := range codes {
		if ce.Code == code {
			return true
		}
	}
	return false
}

// IsUnexpectedCloseError reports whether err is a *CloseError whose code is
// none of expectedCodes.
func IsUnexpectedCloseError(err error, expectedCodes ...int) bool {
	var ce *CloseError
	if !errors.As(err, &ce) {
		return false
	}
	for _, code := range expectedCodes {
		if ce.Code == code {
			return false
		}
	}
	return true
}

// FormatCloseMessage returns the payload of a close message with closeCode
// and text, for WriteControl or WriteMessage with CloseMessage. For
// CloseNoStatusReceived it is empty: that code means "no code" and is
// never sent.
func FormatCloseMessage(closeCode int, text string) []byte {
	if closeCode == CloseNoStatusReceived {
		return []byte{}
	}
	b := make([]byte, 2+len(text))
	b[0], b[1] = byte(closeCode>>8), byte(closeCode)
	copy(b[2:], text)
	return b
}

// BufferPool is a pool of buffers (see Upgrader.WriteBufferPool). rally
// keeps its own pools, so a pool given here is accepted and not used.
type BufferPool interface {
	// Get gets a value from the pool or returns nil if the pool is empty.
	Get() interface{}
	// Put adds a value to the pool.
	Put(interface{})
}

// Conn is a WebSocket connection, made by Upgrader.Upgrade or Dialer.Dial.
//
// Concurrency, as gorilla's: one goroutine may call the read methods
// (NextReader, ReadMessage, ReadJSON, SetReadDeadline, ...) and one the
// write methods (NextWriter, WriteMessage, WriteJSON, WritePreparedMessage,
// SetWriteDeadline, ...) at the same time; Close and WriteControl may be
// called concurrently with every other method. rally's engine underneath
// is safer than that (its writes are safe from many goroutines), but the
// state this type keeps for gorilla's API is not.
type Conn struct {
	rc          *rally.Conn
	nc          net.Conn
	subprotocol string

	// Read side: the reading goroutine's.
	readErr   error
	readLimit atomic.Int64
	reader    messageReader
	rdl       deadline
	inPing    atomic.Bool
	gotClose  atomic.Bool // a close frame arrived (rally has answered it)
	ping      atomic.Pointer[func(string) error]
	pong      atomic.Pointer[func(string) error]
	closeH    atomic.Pointer[func(int, string) error]

	// Write side: the writing goroutine's, but for writeErr.
	writer     messageWriter
	wdl        deadline
	compress   atomic.Bool
	level      atomic.Int32
	wmu        sync.Mutex
	writeErr   error
	closeSent  atomic.Bool
	closedHere atomic.Bool   // Close was called
	closing    chan struct{} // closed when the close handshake closeWith began has ended
}

// newConn makes a Conn whose rally connection is still to come.
func newConn() *Conn {
	c := &Conn{}
	c.reader.c = c
	c.writer.c = c
	c.compress.Store(true)
	c.level.Store(1)
	return c
}

// connOptions are the rally settings behind gorilla's semantics: no read
// limit of rally's own (SetReadLimit is enforced here, gorilla's default
// being none) and the ping and pong handlers.
func (c *Conn) connOptions() rally.ConnOptions {
	return rally.ConnOptions{ReadLimit: -1, OnPing: c.onPing, OnPong: c.onPong}
}

// Subprotocol returns the subprotocol chosen in the handshake, or "".
func (c *Conn) Subprotocol() string { return c.subprotocol }

// Close closes the network connection without sending a close message
// (to close cleanly, send one with WriteControl first). A read in progress
// returns an error. If a close message was sent, Close first gives the
// close handshake up to closeWait to finish, so that the peer gets the
// close frame rather than a cut connection (gorilla writes the frame
// synchronously; rally sends it on the goroutine that waits for the
// answer). If the peer's close already arrived, rally lets its answer go
// out before the TCP connection ends.
func (c *Conn) Close() error {
	if c.closedHere.Swap(true) {
		return &net.OpError{Op: "close", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: net.ErrClosed}
	}
	c.wmu.Lock()
	closing := c.closing
	c.wmu.Unlock()
	if closing != nil {
		t := time.NewTimer(closeWait)
		select {
		case <-closing:
		case <-t.C:
		}
		t.Stop()
	}
	c.rc.CloseNow()
	return nil
}

// closeWait bounds how long Close waits for a close handshake begun by a
// close message.
const closeWait = time.Second

// LocalAddr returns the local network address.
func (c *Conn) LocalAddr() net.Addr { return c.rc.LocalAddr() }

// RemoteAddr returns the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.rc.RemoteAddr() }

// NetConn returns the network connection under the WebSocket: the one the
// server hijacked, or the one the client dialled (before TLS, for wss://).
// Reading or writing it directly corrupts the WebSocket stream. It is nil
// for a WebSocket over HTTP/2.
func (c *Conn) NetConn() net.Conn { return c.nc }

// UnderlyingConn returns NetConn. Deprecated in gorilla: use NetConn.
func (c *Conn) UnderlyingConn() net.Conn { return c.nc }

// EnableWriteCompression sets whether the following messages are
// compressed, where permessage-deflate was negotiated (on by default then).
func (c *Conn) EnableWriteCompression(enable bool) { c.compress.Store(enable) }

// SetCompressionLevel checks level (flate's -2 to 9) and records it. rally
// compresses at the level of its own options (1, the fastest), whatever is
// recorded here.
func (c *Conn) SetCompressionLevel(level int) error {
	if level < -2 || level > 9 {
		return errors.New("websocket: invalid compression level")
	}
	c.level.Store(int32(level))
	return nil
}

func (c *Conn) compressMode() rally.Compress {
	if c.compress.Load() {
		return rally.CompressAuto
	}
	return rally.CompressNever
}

// SetReadDeadline sets the time by which a read must have returned. When
// it passes during a read, that read and every later one fail with a
// timeout (a net.Error whose Timeout is true), as in gorilla: the read
// side is then unusable. A zero t means no deadline. It may be called
// from a pong handler to extend the read in progress.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the time by which a write must have returned.
// A write that times out fails, and so does every later one. A zero t
// means no deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.set(t)
	return nil
}

// SetReadLimit sets the largest message, in bytes, that the read methods
// accept; 0 or less means no limit (the default). A longer message makes
// the read fail with ErrReadLimit after the peer is sent close 1009.
func (c *Conn) SetReadLimit(limit int64) { c.readLimit.Store(limit) }

// SetPingHandler sets the function called with the payload of each ping
// received, on the reading goroutine during a read. nil restores the
// default. Whatever the handler, rally answers every ping with a pong
// (RFC 6455 5.5.2 requires it): a handler that sends its own pong with
// WriteControl does not make a second one. A handler's error ends the read
// in progress with that error.
func (c *Conn) SetPingHandler(h func(appData string) error) {
	if h == nil {
		c.ping.Store(nil)
		return
	}
	c.ping.Store(&h)
	c.rdl.pin()
}

// PingHandler returns the ping handler. The default one answers with a
// pong (which rally sends for it).
func (c *Conn) PingHandler() func(appData string) error {
	if h := c.ping.Load(); h != nil {
		return *h
	}
	return c.defaultPingHandler
}

func (c *Conn) defaultPingHandler(appData string) error {
	err := c.WriteControl(PongMessage, []byte(appData), time.Now().Add(time.Second))
	if err == ErrCloseSent {
		return nil
	}
	return err
}

// SetPongHandler sets the function called with the payload of each pong
// received, on the reading goroutine during a read (to extend the read
// deadline, typically). nil restores the default, which does nothing.
// A handler's error ends the read in progress with that error.
func (c *Conn) SetPongHandler(h func(appData string) error) {
	if h == nil {
		c.pong.Store(nil)
		return
	}
	c.pong.Store(&h)
	c.rdl.pin()
}

// PongHandler returns the pong handler.
func (c *Conn) PongHandler() func(appData string) error {
	if h := c.pong.Load(); h != nil {
		return *h
	}
	return func(string) error { return nil }
}

// SetCloseHandler sets the function called with the code and reason of
// the peer's close message, before the read that met it returns. The read
// then returns the handler's error, or a *CloseError with code and text
// if it returned nil. nil restores the default, which answers with a close
// message of the same code. rally answers the peer's close in any case
// (RFC 6455 5.5.1), so a handler need not.
func (c *Conn) SetCloseHandler(h func(code int, text string) error) {
	if h == nil {
		c.closeH.Store(nil)
		return
	}
	c.closeH.Store(&h)
}

// CloseHandler returns the close handler.
func (c *Conn) CloseHandler() func(code int, text string) error {
	if h := c.closeH.Load(); h != nil {
		return *h
	}
	return c.defaultCloseHandler
}

func (c *Conn) defaultCloseHandler(code int, _ string) error {
	c.WriteControl(CloseMessage, FormatCloseMessage(code, ""), time.Now().Add(time.Second))
	return nil
}

func (c *Conn) onPing(_ *rally.Conn, p []byte) {
	h := c.ping.Load()
	if h == nil {
		return
	}
	c.inPing.Store(true)
	err := (*h)(string(p))
	c.inPing.Store(false)
	if err != nil {
		c.rdl.abort(err)
	}
}

func (c *Conn) onPong(_ *rally.Conn, p []byte) {
	h := c.pong.Load()
	if h == nil {
		return
	}
	if err := (*h)(string(p)); err != nil {
		c.rdl.abort(err)
	}
}

// readError turns what rally's read returned into gorilla's error, which
// every later read returns too.
func (c *Conn) readError(err error) error {
	if errors.Is(err, errAborted) {
		if cause := c.rdl.takeCause(); cause != nil {
			return cause
		}
	}
	if errors.Is(err, errDeadline) {
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
	}
	if c.closedHere.Load() {
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: net.ErrClosed}
	}
	var ce *rally.CloseError
	if !errors.As(err, &ce) {
		return err
	}
	switch {
	case ce.Code == CloseAbnormalClosure:
		return &CloseError{Code: CloseAbnormalClosure, Text: io.ErrUnexpectedEOF.Error()}
	case ce.Err != nil:
		// The peer broke the protocol; rally sent it this code.
		return &CloseError{Code: int(ce.Code), Text: ce.Reason}
	}
	c.gotClose.Store(true)
	if herr := c.CloseHandler()(int(ce.Code), ce.Reason); herr != nil {
		return herr
	}
	return &CloseError{Code: int(ce.Code), Text: ce.Reason}
}

// NextReader returns the type of the next data message (TextMessage or
// BinaryMessage) and a reader for its payload, which returns io.EOF at the
// message's end. Control messages met on the way go to their handlers.
// The unread rest of the previous message is discarded first. The reader
// is valid until the next call of a read method: it is the same reader
// every time (so that reading costs no allocation), reading the current
// message. After an error, every later call returns the same error.
func (c *Conn) NextReader() (messageType int, r io.Reader, err error) {
	if err := c.readState(); err != nil {
		return -1, nil, err
	}
	c.reader.active = false
	typ, mr, err := c.rc.Reader(c.rdl.context())
	if err != nil {
		c.readErr = c.readError(err)
		return -1, nil, c.readErr
	}
	c.reader.r, c.reader.n, c.reader.active = mr, 0, true
	return int(typ), &c.reader, nil
}

// ReadMessage reads the next data message whole: its type and a payload
// the caller owns. See NextReader.
func (c *Conn) ReadMessage() (messageType int, p []byte, err error) {
	if c.readLimit.Load() > 0 {
		typ, r, err := c.NextReader()
		if err != nil {
			return typ, nil, err
		}
		p, err := io.ReadAll(r)
		return typ, p, err
	}
	if err := c.readState(); err != nil {
		return -1, nil, err
	}
	c.reader.active = false
	typ, p, err := c.rc.Read(c.rdl.context())
	if err != nil {
		c.readErr = c.readError(err)
		return -1, nil, c.readErr
	}
	return int(typ), p, nil
}

// readState returns the error that keeps the read side shut, if any: a
// read starting after its deadline passed fails at once, as a net.Conn's.
func (c *Conn) readState() error {
	if c.readErr == nil && c.rdl.active.Load() && c.rdl.Err() == errDeadline {
		c.readErr = c.readError(errDeadline)
	}
	return c.readErr
}

// messageReader reads the payload of the current message.
type messageReader struct {
	c      *Conn
	r      io.Reader
	n      int64 // bytes read so far
	active bool
}

// Read fills p with the message's payload; io.EOF at its end.
func (r *messageReader) Read(p []byte) (int, error) {
	c := r.c
	if !r.active {
		if c.readErr != nil {
			return 0, c.readErr
		}
		return 0, io.EOF
	}
	n, err := r.r.Read(p)
	r.n += int64(n)
	if lim := c.readLimit.Load(); lim > 0 && r.n > lim {
		r.active = false
		c.readErr = ErrReadLimit
		c.closeWith(CloseMessageTooBig, "")
		return 0, ErrReadLimit
	}
	switch {
	case err == io.EOF:
		r.active = false
	case err != nil:
		r.active = false
		c.readErr = c.readError(err)
		return n, c.readErr
	}
	return n, err
}

// writeState returns the error that keeps the write side shut, if any.
func (c *Conn) writeState() error {
	if c.closeSent.Load() {
		return ErrCloseSent
	}
	if c.wdl.active.Load() && c.wdl.Err() == errDeadline {
		// A write starting after its deadline passed fails at once.
		return c.writeResult(errDeadline)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeErr
}

// writeResult turns what rally's write returned into gorilla's error and
// keeps it: a failed write leaves the write side shut.
func (c *Conn) writeResult(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, errDeadline):
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
	case c.closedHere.Load():
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: net.ErrClosed}
	case errors.Is(err, rally.ErrClosed):
		err = ErrCloseSent
	}
	c.wmu.Lock()
	if c.writeErr == nil {
		c.writeErr = err
	}
	err = c.writeErr
	c.wmu.Unlock()
	return err
}

// WriteMessage sends data as one message of messageType. For a data
// message it returns once the frame was handed to the kernel; a writer
// still open from NextWriter is closed first. CloseMessage, PingMessage
// and PongMessage go through WriteControl with the write deadline.
func (c *Conn) WriteMessage(messageType int, data []byte) error {
	switch messageType {
	case TextMessage, BinaryMessage:
	case CloseMessage, PingMessage, PongMessage:
		return c.WriteControl(messageType, data, c.wdl.get())
	default:
		return errBadWriteOpCode
	}
	if err := c.writeState(); err != nil {
		return err
	}
	c.writer.end()
	return c.writeResult(c.rc.WriteCompress(c.wdl.context(), rally.MessageType(messageType), data, c.compressMode()))
}

// NextWriter returns a writer for the next message of messageType
// (TextMessage or BinaryMessage), sent as fragments as its buffer fills,
// ended by Close. A writer still open is closed first. The writer is the
// same every time (no allocation per message) and is valid until Close.
func (c *Conn) NextWriter(messageType int) (io.WriteCloser, error) {
	if messageType != TextMessage && messageType != BinaryMessage {
		return nil, errBadWriteOpCode
	}
	if err := c.writeState(); err != nil {
		return nil, err
	}
	c.writer.end()
	w, err := c.rc.WriterCompress(c.wdl.context(), rally.MessageType(messageType), c.compressMode())
	if err != nil {
		return nil, c.writeResult(err)
	}
	c.writer.w, c.writer.open = w, true
	return &c.writer, nil
}

// messageWriter streams one message.
type messageWriter struct {
	c    *Conn
	w    io.WriteCloser
	open bool
}

// end closes the writer if it is open.
func (w *messageWriter) end() {
	if w.open {
		w.Close()
	}
}

// Write sends p as part of the message.
func (w *messageWriter) Write(p []byte) (int, error) {
	if !w.open {
		return 0, errWriteClosed
	}
	n, err := w.w.Write(p)
	if err != nil {
		w.open = false
		return n, w.c.writeResult(err)
	}
	return n, nil
}

// WriteString sends s as part of the message.
func (w *messageWriter) WriteString(s string) (int, error) {
	if !w.open {
		return 0, errWriteClosed
	}
	return w.Write([]byte(s))
}

// Close ends the message; the last fragment is sent before it returns.
func (w *messageWriter) Close() error {
	if !w.open {
		return errWriteClosed
	}
	w.open = false
	return w.c.writeResult(w.w.Close())
}

// WriteControl sends a control message (CloseMessage, PingMessage or
// PongMessage) with a payload of at most 125 bytes, by deadline (zero: no
// deadline). It is safe to call concurrently with every other method.
//
// A close message starts the close handshake: it returns without waiting,
// later writes fail with ErrCloseSent, and the reader then gets the peer's
// answer as a *CloseError. Its payload (FormatCloseMessage) must hold a
// code that may be sent (not 1005, 1006 or 1015, nor outside the ranges of
// RFC 6455 7.4) and a reason of valid UTF-8. A pong is sent only as
// the answer to a ping, which rally makes itself: from a ping handler it
// is accepted and not sent twice; elsewhere it is refused.
func (c *Conn) WriteControl(messageType int, data []byte, deadline time.Time) error {
	if len(data) > frame.MaxControlPayload {
		return errInvalidControlFrame
	}
	switch messageType {
	case CloseMessage:
		var code uint16
		var reason []byte
		switch {
		case len(data) == 1:
			return errInvalidControlFrame
		case len(data) >= 2:
			code, reason = uint16(data[0])<<8|uint16(data[1]), data[2:]
		}
		var buf [frame.MaxControlPayload]byte
		if _, err := frame.AppendClosePayload(buf[:0], code, reason); err != nil {
			return errors.New("websocket: " + err.Error())
		}
		if c.closeSent.Swap(true) {
			return ErrCloseSent
		}
		if !c.gotClose.Load() {
			c.closeWith(code, string(reason))
		}
		return nil
	case PingMessage:
		if c.closeSent.Load() {
			return ErrCloseSent
		}
		ctx := context.Background()
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
		}
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		err := c.rc.Ping(ctx, data)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			return &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
		case errors.Is(err, rally.ErrClosed):
			return ErrCloseSent
		}
		return err
	case PongMessage:
		if c.closeSent.Load() {
			return ErrCloseSent
		}
		if c.inPing.Load() {
			return nil
		}
		return errUnsolicitedPong
	}
	return errBadWriteOpCode
}

// closeWith sends a close message without waiting: rally's Close finishes
// the handshake (bounded by its close timeout) on a goroutine of its own.
func (c *Conn) closeWith(code uint16, reason string) {
	c.closeSent.Store(true)
	done := make(chan struct{})
	c.wmu.Lock()
	c.closing = done
	c.wmu.Unlock()
	go func() {
		defer close(done)
		c.rc.Close(code, reason)
	}()
}
