package rawpeer

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// Peer is one end of a raw WebSocket connection: a net.Conn with a read
// buffer, on the client side (frames written with WriteFrame are masked) or
// the server side. It answers nothing by itself. A Peer is used by one
// goroutine at a time, with two exceptions: one goroutine may read
// (ReadFrame, SetReadTimeout) while another writes (Write*, SetWriteTimeout),
// and Close may be called from any goroutine to unblock both.
type Peer struct {
	nc           net.Conn
	br           *bufio.Reader
	client       bool
	readTimeout  time.Duration
	writeTimeout time.Duration

	// Trace, when set, is called with every chunk of bytes written (out
	// true) and with the raw bytes of every frame read, header and payload
	// as they were on the wire (out false). b is valid only during the call.
	Trace func(out bool, b []byte)
}

// NewPeer wraps an established connection (TCP, a net.Pipe end, ...) whose
// handshake is done or will be done through the peer. client says on which
// side the peer stands: a client masks what WriteFrame sends. On TCP,
// Nagle's algorithm is turned off so that each write leaves at once.
func NewPeer(nc net.Conn, client bool) *Peer {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return &Peer{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), client: client}
}

// NetConn returns the underlying connection, for what the peer does not
// offer (CloseWrite, addresses). Reading from it directly skips bytes the
// peer has already buffered.
func (p *Peer) NetConn() net.Conn { return p.nc }

// SetTimeout sets how long each following read (ReadFrame, ReadResponse,
// ReadRequest, ExpectClose and ExpectEOF as a whole) and each write may
// take. 0 means no limit. It is SetReadTimeout and SetWriteTimeout in one.
func (p *Peer) SetTimeout(d time.Duration) {
	p.readTimeout, p.writeTimeout = d, d
}

// SetReadTimeout sets how long each following read may take (0: no limit).
func (p *Peer) SetReadTimeout(d time.Duration) { p.readTimeout = d }

// SetWriteTimeout sets how long each following write call may take (0: no
// limit).
func (p *Peer) SetWriteTimeout(d time.Duration) { p.writeTimeout = d }

// Timeout returns the read timeout.
func (p *Peer) Timeout() time.Duration { return p.readTimeout }

func (p *Peer) readDeadline() {
	if p.readTimeout > 0 {
		p.nc.SetReadDeadline(time.Now().Add(p.readTimeout))
	} else {
		p.nc.SetReadDeadline(time.Time{})
	}
}

func (p *Peer) writeDeadline() {
	if p.writeTimeout > 0 {
		p.nc.SetWriteDeadline(time.Now().Add(p.writeTimeout))
	} else {
		p.nc.SetWriteDeadline(time.Time{})
	}
}

// WriteRaw writes b exactly as it is, in one write call.
func (p *Peer) WriteRaw(b []byte) error {
	p.writeDeadline()
	if p.Trace != nil {
		p.Trace(true, b)
	}
	_, err := p.nc.Write(b)
	return err
}

// WriteFrame builds f (see Build) and writes it in one write call. A client
// peer masks an unmasked frame with a random key; a frame with Masked set is
// sent with its own Mask. A server peer sends f as it is. To send an
// unmasked frame from a client, use WriteRaw(Build(f)).
func (p *Peer) WriteFrame(f Frame) error {
	if p.client && !f.Masked {
		f.Masked = true
		rand.Read(f.Mask[:])
	}
	return p.WriteRaw(Build(f))
}

// WriteChopped writes b in writes of chunk bytes (the last may be shorter),
// each its own write call; with Nagle off, each normally leaves as its own
// TCP segment, though the receiver may still read several at once.
func (p *Peer) WriteChopped(b []byte, chunk int) error {
	if chunk <= 0 {
		return fmt.Errorf("rawpeer: chunk size %d, want > 0", chunk)
	}
	for len(b) > 0 {
		n := min(chunk, len(b))
		if err := p.WriteRaw(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Read reads raw bytes from the connection through the peer's buffer, so
// that bytes buffered past a handshake are not skipped. It honours the read
// timeout. It makes Peer an io.Reader for tests that parse frames their own
// way (streaming, byte by byte).
func (p *Peer) Read(b []byte) (int, error) {
	p.readDeadline()
	return p.br.Read(b)
}

// ReadFrame reads one frame and returns it with the payload unmasked. The
// peer's timeout bounds each wait for bytes, not the whole frame: a large
// frame that keeps arriving is read however slow the machine is, and one
// that stops arriving fails after the timeout. It returns io.EOF if the connection ended cleanly
// before the first byte of a frame, io.ErrUnexpectedEOF inside one, and the
// net error (a timeout is a net.Error with Timeout() true) otherwise.
// Memory is committed as payload arrives, not on the length the header
// claims. A length with its most significant bit set (RFC 6455 5.2) is an
// error.
func (p *Peer) ReadFrame() (Frame, error) {
	p.readDeadline()
	return p.readFrameWith(progress{p})
}

// readFrame is ReadFrame under the read deadline already set, which bounds
// the whole frame.
func (p *Peer) readFrame() (Frame, error) { return p.readFrameWith(p.br) }

// progress reads through the peer's buffer and moves the read deadline on
// after every read that brought bytes.
type progress struct{ p *Peer }

func (r progress) Read(b []byte) (int, error) {
	n, err := r.p.br.Read(b)
	if n > 0 {
		r.p.readDeadline()
	}
	return n, err
}

// readFrameWith reads one frame's payload through payload, its header
// through the peer's buffer.
func (p *Peer) readFrameWith(payload io.Reader) (Frame, error) {
	var f Frame
	var hdr [14]byte
	if _, err := io.ReadFull(p.br, hdr[:2]); err != nil {
		return f, err
	}
	f.Fin = hdr[0]&0x80 != 0
	f.Rsv = hdr[0] & (Rsv1 | Rsv2 | Rsv3)
	f.Opcode = hdr[0] & 0x0F
	f.Masked = hdr[1]&0x80 != 0
	n := uint64(hdr[1] & 0x7F)
	hl := 2
	switch n {
	case 126:
		hl += 2
	case 127:
		hl += 8
	}
	if f.Masked {
		hl += 4
	}
	if _, err := io.ReadFull(p.br, hdr[2:hl]); err != nil {
		return f, unexpected(err)
	}
	switch n {
	case 126:
		n = uint64(binary.BigEndian.Uint16(hdr[2:4]))
	case 127:
		n = binary.BigEndian.Uint64(hdr[2:10])
		if n>>63 != 0 {
			return f, fmt.Errorf("rawpeer: frame length %#x has its most significant bit set", n)
		}
	}
	if f.Masked {
		copy(f.Mask[:], hdr[hl-4:hl])
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, payload, int64(n)); err != nil {
		return f, unexpected(err)
	}
	f.Payload = buf.Bytes()
	if f.Payload == nil {
		f.Payload = []byte{}
	}
	if p.Trace != nil {
		p.Trace(false, append(hdr[:hl:hl], f.Payload...))
	}
	if f.Masked {
		mask(f.Payload, f.Mask)
	}
	return f, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ExpectClose reads frames, skipping any that are not close frames, until
// a close frame arrives within the peer's timeout, and returns it. It fails
// t (with Fatalf, so call it from the test goroutine) when the read fails
// or the frame's code differs from code; code 0 expects an empty body.
func (p *Peer) ExpectClose(t testing.TB, code uint16) Frame {
	t.Helper()
	p.readDeadline() // one deadline for the whole wait, not one per frame skipped
	for {
		f, err := p.readFrame()
		if err != nil {
			t.Fatalf("rawpeer: waiting for close %d (timeout %v): %v", code, p.readTimeout, err)
		}
		if f.Opcode != OpClose {
			continue
		}
		got, _, ok := ParseClose(f.Payload)
		if !ok {
			t.Fatalf("rawpeer: close frame with a 1-byte body %x, want code %d", f.Payload, code)
		}
		if got != code {
			t.Fatalf("rawpeer: close code %d (body %x), want %d", got, f.Payload, code)
		}
		return f
	}
}

// ExpectEOF reads and discards whatever arrives until the other side closes
// the TCP connection (a read returns EOF or a reset), and fails t (Fatalf)
// if that does not happen within the peer's timeout.
func (p *Peer) ExpectEOF(t testing.TB) {
	t.Helper()
	if err := p.WaitEOF(); err != nil {
		t.Fatalf("rawpeer: %v", err)
	}
}

// WaitEOF is ExpectEOF without a testing.TB: it returns nil when the other
// side closed the connection within the peer's timeout, an error otherwise.
func (p *Peer) WaitEOF() error {
	p.readDeadline()
	var buf [4096]byte
	discarded := 0
	for {
		n, err := p.br.Read(buf[:])
		discarded += n
		if err == nil {
			continue
		}
		if IsClosedByPeer(err) {
			return nil
		}
		return fmt.Errorf("waiting for the peer to close TCP (%d bytes discarded): %w", discarded, err)
	}
}

// IsClosedByPeer reports whether err means the other side closed the
// connection: EOF, an unexpected EOF, or a connection reset.
func IsClosedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Close closes the connection at once, without a close frame.
func (p *Peer) Close() error { return p.nc.Close() }
