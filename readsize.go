package rally

// How much a read asks for when frames are large. Small frames share the
// default buffer (readBufferSize, many frames per read). For frames larger
// than largeFrame, a read asks for the rest of the current frame and then
// for as many whole frames of the same size as fit in readAhead, so that a
// stream of large messages arrives whole messages per read: fewer reads per
// message, and a message whole in one read is handed to a Server's Message
// callback, Read or ReadAppend from the read buffer, never assembled. The
// buffer is still borrowed only once the socket is readable.
const (
	largeFrame = 8 << 10
	readAhead  = 256 << 10
)

// readSize is how many bytes the next read should ask for, judged from the
// frame being received or, between frames, the last one; 0 means the
// default: a readBufferSize buffer, read to its capacity.
func (p *parser) readSize() int {
	if p.hdrN > 0 || p.h.Opcode.IsControl() {
		return 0
	}
	frameSize := p.h.Length + int64(p.h.Size())
	if frameSize <= largeFrame {
		return 0
	}
	var want int64
	if p.inFrame {
		want = p.remaining
	}
	if want < readAhead {
		want += max((readAhead-want)/frameSize, 1) * frameSize
	}
	return int(min(want, readAhead))
}

// corkMax is how many bytes a cork gathers before the sends into it go out
// at once (send.go): a socket buffer's worth, far more than a batch of small
// messages needs to leave in one write.
const corkMax = 256 << 10

// largeSend is the frame size from which a send into a cork that has
// gathered nothing yet is written at once (send.go): a write of the
// caller's bytes, header and payload, costs less than copying them into the
// queue, and one write per frame that large gains little from batching.
const largeSend = 64 << 10
