package deflate

import "slices"

// window keeps the last len(buf) bytes of a stream: what a connection with
// context takeover must remember between messages once it has given its
// codec back. Writing costs a copy of at most len(buf) bytes; the bytes
// live in a ring and are put in order only when they are needed.
type window struct {
	buf  []byte // the ring, allocated on the first write
	size int
	pos  int  // where the next byte goes
	full bool // the ring has wrapped: buf[pos:] is older than buf[:pos]
}

func newWindow(size int) window { return window{size: size} }

// reset empties the window, keeping its buffer.
func (w *window) reset() { w.pos, w.full = 0, false }

func (w *window) write(p []byte) {
	if len(p) == 0 {
		return
	}
	if w.buf == nil {
		w.buf = make([]byte, w.size)
	}
	if len(p) >= w.size {
		copy(w.buf, p[len(p)-w.size:])
		w.pos, w.full = 0, true
		return
	}
	n := copy(w.buf[w.pos:], p)
	if n < len(p) {
		w.pos = copy(w.buf, p[n:])
		w.full = true
		return
	}
	w.pos += n
	if w.pos == w.size {
		w.pos, w.full = 0, true
	}
}

// linear returns the window, oldest byte first, rotating the ring in place
// if it has wrapped. The result is valid until the next write.
func (w *window) linear() []byte {
	if !w.full {
		return w.buf[:w.pos]
	}
	if w.pos != 0 {
		// Rotate left by pos: reverse both parts, then the whole.
		slices.Reverse(w.buf[:w.pos])
		slices.Reverse(w.buf[w.pos:])
		slices.Reverse(w.buf)
		w.pos = 0
	}
	return w.buf
}

// copyTo puts the window, oldest byte first, at the start of dst (which
// must hold as many bytes as the window) and returns that part of dst.
func (w *window) copyTo(dst []byte) []byte {
	if !w.full {
		return dst[:copy(dst, w.buf[:w.pos])]
	}
	n := copy(dst, w.buf[w.pos:])
	n += copy(dst[n:], w.buf[:w.pos])
	return dst[:n]
}
