package rally

import (
	"fmt"

	"github.com/rallyws/rally/deflate"
	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// DefaultCompressionThreshold is the size below which a message goes out
// uncompressed when the sender keeps no compression context (as npm ws).
const DefaultCompressionThreshold = 1024

// CompressionOptions configure permessage-deflate (RFC 7692). On the server
// side a nil *CompressionOptions declines it (the default, as npm ws);
// on the client side nil offers it with these defaults (as npm ws and
// browsers do) and Disabled does not offer it.
type CompressionOptions struct {
	// Disabled, on a client, does not offer compression at all.
	Disabled bool

	// Level is the deflate level, 1 (fastest, the default) to 9.
	Level int

	// Threshold: a message smaller than this goes out uncompressed when the
	// sender keeps no context between messages. 0 means
	// DefaultCompressionThreshold; negative compresses every message. With
	// context takeover only messages under 32 bytes go out uncompressed
	// (deflate cannot make them smaller).
	Threshold int

	// ServerNoContextTakeover: the server compresses every message on its
	// own. On a server it is what the server answers; on a client, what it
	// asks for. A server that publishes one message to many connections
	// wants it: the message is compressed once for all of them.
	ServerNoContextTakeover bool

	// ClientNoContextTakeover: the client compresses every message on its
	// own, so the server keeps no window for it between messages.
	ClientNoContextTakeover bool

	// ServerMaxWindowBits and ClientMaxWindowBits bound the LZ77 windows,
	// 8 to 15 (0 means 15): smaller windows cost less memory per connection
	// and compress less.
	ServerMaxWindowBits int
	ClientMaxWindowBits int

	// ReceiveOnly negotiates compression so the peer may compress what it
	// sends, but this side sends every message uncompressed.
	ReceiveOnly bool
}

func (o *CompressionOptions) validate() error {
	if o.Level < 0 || o.Level > deflate.BestCompression {
		return fmt.Errorf("rally: compression level %d, want 0 to %d", o.Level, deflate.BestCompression)
	}
	if err := o.serverConfig().Validate(); err != nil {
		return fmt.Errorf("rally: %w", err)
	}
	return nil
}

func (o *CompressionOptions) serverConfig() deflate.ServerConfig {
	return deflate.ServerConfig{
		ServerNoContextTakeover: o.ServerNoContextTakeover,
		ClientNoContextTakeover: o.ClientNoContextTakeover,
		ServerMaxWindowBits:     o.ServerMaxWindowBits,
		ClientMaxWindowBits:     o.ClientMaxWindowBits,
	}
}

func (o *CompressionOptions) clientConfig() deflate.ClientConfig {
	return deflate.ClientConfig{
		ServerNoContextTakeover: o.ServerNoContextTakeover,
		ClientNoContextTakeover: o.ClientNoContextTakeover,
		ServerMaxWindowBits:     o.ServerMaxWindowBits,
		ClientMaxWindowBits:     o.ClientMaxWindowBits,
	}
}

// negotiateCompression answers a client's offers. It returns the extension
// to put in the 101 ("" when declined) and the parameters, or a refusal
// when the header does not parse.
func negotiateCompression(o *CompressionOptions, offers []string) (string, deflate.Params, *refusal) {
	if o == nil || o.Disabled || len(offers) == 0 {
		return "", deflate.Params{}, nil
	}
	if err := o.validate(); err != nil {
		return "", deflate.Params{}, &refusal{status: 500, reason: "the server's compression options are invalid"}
	}
	p, answer, err := deflate.Negotiate(offers, o.serverConfig())
	if err != nil {
		return "", p, &refusal{status: 400, reason: "malformed Sec-WebSocket-Extensions header"}
	}
	return answer, p, nil
}

// compression is a connection's permessage-deflate state.
type compression struct {
	comp      *deflate.Compressor // nil when this side sends uncompressed
	decomp    *deflate.Decompressor
	level     int
	bits      int  // the window this side sends with
	takeover  bool // this side keeps context between the messages it sends
	threshold int
	sendUsed  bool // since the last idle; guarded by the connection's write lock
	recvUsed  bool // since the last idle; the reader's

	// The reader's: the compressed message being inflated, piece by piece
	// as its frames arrive.
	inflating bool // a chunk was fed and may still give pieces
	piece     int  // bytes of the last piece, not yet told to the transport (yieldInflating)
	op        frame.Opcode
	first     bool // the next piece is the message's first
	fin       bool // the chunk fed ends the message
	size      int64
	utf8      frame.UTF8
}

// enableCompression sets the connection up for the negotiated parameters.
func (c *Conn) enableCompression(o *CompressionOptions, p deflate.Params) {
	z := &compression{level: o.Level, threshold: o.Threshold}
	if z.level == 0 {
		z.level = deflate.DefaultLevel
	}
	if z.threshold == 0 {
		z.threshold = DefaultCompressionThreshold
	}
	sendBits, sendNoTakeover := p.ClientMaxWindowBits, p.ClientNoContextTakeover
	recvBits, recvNoTakeover := p.ServerMaxWindowBits, p.ServerNoContextTakeover
	if c.rd.p.server {
		sendBits, sendNoTakeover, recvBits, recvNoTakeover = recvBits, recvNoTakeover, sendBits, sendNoTakeover
	}
	z.bits, z.takeover = sendBits, !sendNoTakeover
	if !o.ReceiveOnly {
		z.comp = deflate.NewCompressor(z.level, sendBits, z.takeover)
	}
	z.decomp = deflate.NewDecompressor(recvBits, !recvNoTakeover)
	c.z = z
	c.rd.p.allowedRsv = frame.Rsv1
}

// Compress overrides, for one message, whether it goes out compressed
// (see Conn.WriteCompress and Conn.SendCompress). It has an effect only
// where permessage-deflate was negotiated.
type Compress int

const (
	// CompressAuto follows the connection's options: the threshold without
	// context takeover, every message of 32 bytes or more with it.
	CompressAuto Compress = iota
	// CompressAlways compresses the message whatever its size.
	CompressAlways
	// CompressNever sends it uncompressed (RSV1 clear), for payloads that
	// are compressed already (images, archives). With context takeover the
	// message simply stays out of the compressed stream.
	CompressNever
)

// wantsCompression reports whether a whole message of n bytes should go
// out compressed.
func (z *compression) wantsCompression(n int, mode Compress) bool {
	if z == nil || z.comp == nil || mode == CompressNever {
		return false
	}
	if mode == CompressAlways {
		return true
	}
	if z.takeover {
		return n >= 32
	}
	return z.threshold < 0 || n >= z.threshold
}

// compressLocked compresses p for sending into a borrowed buffer, in send
// order (the caller holds the write lock). The caller gives the buffer back.
func (c *Conn) compressLocked(p []byte) *[]byte {
	buf := bufpool.Get(len(p)/2 + 64)
	*buf = c.z.comp.Compress((*buf)[:0], p)
	c.z.sendUsed = true
	return buf
}

// compressPartLocked compresses one fragment of a streamed message into a
// borrowed buffer, in send order (the caller holds the write lock).
func (c *Conn) compressPartLocked(p []byte, final bool) *[]byte {
	buf := bufpool.Get(len(p)/2 + 64)
	*buf = c.z.comp.CompressPart((*buf)[:0], p, final)
	c.z.sendUsed = true
	return buf
}

// feedCompressed hands a chunk of a compressed message (RSV1 on its first
// frame, RFC 7692 6.1) to the inflater; nextPiece then takes what it
// inflates from it. The wire size was checked on the header.
func (c *Conn) feedCompressed(ev event) {
	z := c.z
	if ev.first {
		z.op, z.first, z.size = ev.op, true, 0
		z.utf8.Reset()
	}
	z.decomp.Feed(ev.payload, ev.fin)
	z.inflating, z.fin, z.recvUsed = true, ev.fin, true
}

// nextPiece returns the next piece the inflater makes of the chunk fed
// last, as a data event (valid until the next event), checking the read
// limit on the inflated size and text for UTF-8 as each piece comes: a
// bad byte in the first KiB of a large message fails the message there,
// not at its end. ok is false when the chunk is used up and the message
// goes on in later frames. The end of a message is its own empty event.
func (c *Conn) nextPiece() (ev event, ok bool, err error) {
	z := c.z
	p, err := z.decomp.Next()
	if err != nil {
		z.inflating = false
		return event{}, false, c.violated(err)
	}
	if p != nil {
		z.size += int64(len(p))
		z.piece = len(p)
		if limit := c.opts.readLimits().size; limit > 0 && z.size > limit {
			return event{}, false, c.inflateFailed(violation(frame.CloseTooBig, "message larger than the read limit"))
		}
		if z.op == frame.OpText && z.utf8.Feed(p) >= 0 {
			return event{}, false, c.inflateFailed(violation(frame.CloseInvalidPayload, "text message is not valid UTF-8"))
		}
		ev = event{kind: evData, op: z.op, payload: p, first: z.first}
		z.first = false
		return ev, true, nil
	}
	z.inflating = false
	if !z.fin {
		return event{}, false, nil
	}
	if z.op == frame.OpText && !z.utf8.Complete() {
		return event{}, false, c.violated(violation(frame.CloseInvalidPayload, "text message ends inside a UTF-8 sequence"))
	}
	ev = event{kind: evData, op: z.op, first: z.first, fin: true}
	z.first = false
	return ev, true, nil
}

// inflateFailed stops the message being inflated and fails the connection.
func (c *Conn) inflateFailed(err error) error {
	c.z.decomp.Abort()
	c.z.inflating = false
	return c.violated(err)
}

// idleCompression gives pooled codec state back when the connection goes
// quiet (the reader is about to wait for more bytes).
func (c *Conn) idleCompression() {
	z := c.z
	if z == nil {
		return
	}
	if z.recvUsed {
		z.recvUsed = false
		z.decomp.Idle()
	}
	if z.comp != nil {
		c.wr.mu.Lock()
		if z.sendUsed {
			z.sendUsed = false
			z.comp.Idle()
		}
		c.wr.mu.Unlock()
	}
}
