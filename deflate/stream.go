package deflate

// A DEFLATE decoder (RFC 1951) that can stop at any byte of its input and
// go on when more arrives: a push decoder, as a connection needs to inflate
// a message frame by frame. Every step (a block header, a code length, a
// literal, a length with its distance) is decoded from a copy of the bit
// buffer and committed only when whole; when the input runs out in the
// middle of a step, the step's bits stay in the buffer (at most 64 bits,
// and no step needs more than 48) and the step starts again with the next
// chunk. Output goes into a 32 KiB ring that is also the history matches
// copy from, and is handed out in pieces of the ring.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// histSize is the ring: the largest window DEFLATE has, and the largest
// piece of output handed out at once.
const histSize = 1 << 15

// fastBits is the width of a Huffman table's direct lookup; longer codes
// are decoded code length by code length.
const fastBits = 9

// huffTable decodes one canonical Huffman code (RFC 1951 3.2.2).
type huffTable struct {
	// fast is indexed by the next fastBits bits of input (first bit
	// lowest): symbol<<4 | code length, or 0 for a code longer than
	// fastBits or no code at all.
	fast   [1 << fastBits]uint16
	count  [16]uint16  // codes of each length
	symbol [288]uint16 // symbols ordered by code length, then value
	maxLen uint        // the longest code's length (0: no code)
}

var errIncomplete = errors.New("incomplete or over-subscribed Huffman code")

// build makes the table for a code with these code lengths (0: the symbol
// has no code). It refuses an over-subscribed code and an incomplete one,
// except for a code of a single symbol of length 1 (RFC 1951 3.2.7 allows
// one distance code) or no code at all; decoding a missing code then fails.
func (h *huffTable) build(lengths []uint8) error {
	h.count = [16]uint16{}
	for _, l := range lengths {
		h.count[l]++
	}
	h.count[0] = 0
	h.maxLen = 0
	for l := 15; l > 0; l-- {
		if h.count[l] != 0 {
			h.maxLen = uint(l)
			break
		}
	}
	left := 1
	for l := 1; l < 16; l++ {
		left = left<<1 - int(h.count[l])
		if left < 0 {
			return errIncomplete
		}
	}
	if left > 0 {
		n := 0
		for _, c := range h.count {
			n += int(c)
		}
		if n > 1 || (n == 1 && h.count[1] != 1) {
			return errIncomplete
		}
	}
	var offs [16]uint16
	for l := 1; l < 15; l++ {
		offs[l+1] = offs[l] + h.count[l]
	}
	for sym, l := range lengths {
		if l != 0 {
			h.symbol[offs[l]] = uint16(sym)
			offs[l]++
		}
	}
	h.fast = [1 << fastBits]uint16{}
	code, i := 0, 0
	for l := 1; l <= fastBits; l++ {
		for range h.count[l] {
			// Codes are sent first bit first: the table is indexed by
			// the code reversed.
			r := 0
			for b := range l {
				r |= (code >> b & 1) << (l - 1 - b)
			}
			entry := h.symbol[i]<<4 | uint16(l)
			for j := r; j < 1<<fastBits; j += 1 << l {
				h.fast[j] = entry
			}
			code++
			i++
		}
		code <<= 1
	}
	return nil
}

// decode reads a symbol from the nb bits of b (first bit lowest). It
// returns the symbol and the bits it took, 0 bits when b holds too few
// to tell, or -1 for a code that does not exist. A code that no longer
// code continues (the one incomplete code build allows) is refused as soon
// as its bits are there, not when 15 bits are: the last bits of a message
// are as checked as the others.
func (h *huffTable) decode(b uint64, nb uint) (sym int, n uint) {
	if e := h.fast[b&(1<<fastBits-1)]; e != 0 {
		if n = uint(e & 15); n > nb {
			return 0, 0
		}
		return int(e >> 4), n
	}
	// A longer code: walk the lengths (as RFC 1951's canonical order
	// allows), comparing the code read so far with each length's first.
	code, first, index := 0, 0, 0
	for l := uint(1); l < 16; l++ {
		if l > nb {
			return 0, 0
		}
		code |= int(b>>(l-1)) & 1
		count := int(h.count[l])
		if code-first < count {
			return int(h.symbol[index+code-first]), l
		}
		if l >= h.maxLen {
			return -1, 0
		}
		index += count
		first = (first + count) << 1
		code <<= 1
	}
	return -1, 0
}

var (
	// RFC 1951 3.2.5: lengths 3 to 258 and distances 1 to 32768.
	lenBaseOf   = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lenExtraOf  = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBaseOf  = [30]uint16{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtraOf = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	// RFC 1951 3.2.7: the order code length code lengths are sent in.
	clenOrder = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

// The fixed codes of RFC 1951 3.2.6, built once. The distance code is
// built with all 32 five-bit codes, so that it is complete; symbols 30
// and 31 are refused when decoded.
var fixedLitTable, fixedDistTable = func() (*huffTable, *huffTable) {
	var l [288]uint8
	for i := range l {
		switch {
		case i < 144:
			l[i] = 8
		case i < 256:
			l[i] = 9
		case i < 280:
			l[i] = 7
		default:
			l[i] = 8
		}
	}
	var d [32]uint8
	for i := range d {
		d[i] = 5
	}
	lit, dist := new(huffTable), new(huffTable)
	if lit.build(l[:]) != nil || dist.build(d[:]) != nil {
		panic("deflate: the fixed Huffman codes do not build")
	}
	return lit, dist
}()

// Decoder states: where the next step starts.
const (
	stBlockHeader  = iota // BFINAL and BTYPE
	stStoredLength        // LEN and NLEN
	stStored              // copying a stored block's bytes
	stTableSizes          // HLIT, HDIST, HCLEN
	stClenLengths         // the code length code's lengths
	stCodeLengths         // the literal/length and distance code lengths
	stCodes               // literals, lengths and distances
	stAfterFinal          // the final block ended: the rest is ignored
)

// stream is the decoder's state, about 40 KiB: pooled, and lent for one
// message or, with context takeover, while the connection is busy.
type stream struct {
	hist [histSize]byte // the ring: output and history
	wr   int            // where the next byte goes
	rd   int            // the first byte not yet handed out
	have int            // bytes of history in the ring (at most histSize)

	bits  uint64 // input bits not yet used, first bit lowest
	nbits uint
	in    []byte // the rest of the current chunk
	last  bool   // the chunk ends the message: the tail follows it
	tail  bool   // the tail is (or was) the input

	state      uint8
	final      bool // the current block is the last one
	storedLeft int  // bytes of the stored block still to copy
	copyLen    int  // bytes of a match still to copy
	copyDist   int

	hlit, hdist, hclen, idx int
	lens                    [286 + 30]uint8
	clen                    [19]uint8
	lit, dist               *huffTable // the current block's codes
	dynLit, dynDist         huffTable  // a dynamic block's codes
}

var streams sync.Pool

// getStream lends a stream at the start of a DEFLATE stream, with no
// history.
func getStream() *stream {
	s, ok := streams.Get().(*stream)
	if !ok {
		s = new(stream)
	}
	s.wr, s.rd, s.have = 0, 0, 0
	s.restart()
	return s
}

// restart puts s at the start of a block stream, keeping its history.
func (s *stream) restart() {
	s.bits, s.nbits = 0, 0
	s.in, s.last, s.tail = nil, false, false
	s.state, s.final = stBlockHeader, false
	s.storedLeft, s.copyLen = 0, 0
}

func putStream(s *stream) {
	s.in = nil
	streams.Put(s)
}

// corrupt is the error for input that is not DEFLATE data.
func corrupt(format string, args ...any) error {
	return &corruptError{err: fmt.Errorf(format, args...)}
}

// refill moves input bytes into the bit buffer while it has room for a
// whole byte. When the chunk is used up and it ends the message, the tail
// (RFC 7692 7.2.2) follows.
func (s *stream) refill() {
	if s.nbits <= 56 && len(s.in) >= 8 {
		// Eight bytes at once; the whole bytes that fit are taken. The
		// bits above nbits are then the next bytes of in, which the next
		// refill puts in the same place again: no harm.
		s.bits |= binary.LittleEndian.Uint64(s.in) << s.nbits
		k := (63 - s.nbits) >> 3
		s.in = s.in[k:]
		s.nbits += k << 3
		return
	}
	for s.nbits <= 56 {
		if len(s.in) == 0 {
			if !s.last || s.tail {
				return
			}
			s.in, s.tail = tail[:], true
		}
		s.bits |= uint64(s.in[0]) << s.nbits
		s.in = s.in[1:]
		s.nbits += 8
	}
}

// consumed reports whether every input byte, the tail included when the
// chunk ends the message, has been taken.
func (s *stream) consumed() bool {
	return len(s.in) == 0 && (!s.last || s.tail)
}

// next decodes until it has a piece of output to hand out or needs more
// input. It returns the piece (valid until the next call), or nil when the
// input is used up.
func (s *stream) next() ([]byte, error) {
	for {
		if s.wr == histSize {
			if s.rd < s.wr {
				p := s.hist[s.rd:s.wr]
				s.rd = s.wr
				return p, nil
			}
			s.wr, s.rd = 0, 0
		}
		more, err := s.step()
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	if s.rd < s.wr {
		p := s.hist[s.rd:s.wr]
		s.rd = s.wr
		return p, nil
	}
	return nil, nil
}

// step decodes as much as it can in the current state, stopping at the
// ring's end. It reports false when it needs more input.
func (s *stream) step() (bool, error) {
	s.refill()
	b, nb := s.bits, s.nbits
	switch s.state {
	case stBlockHeader:
		if nb < 3 {
			return false, nil
		}
		s.final = b&1 == 1
		typ := b >> 1 & 3
		s.bits, s.nbits = b>>3, nb-3
		switch typ {
		case 0:
			// A stored block starts at a byte boundary.
			drop := s.nbits & 7
			s.bits, s.nbits = s.bits>>drop, s.nbits-drop
			s.state = stStoredLength
		case 1:
			s.lit, s.dist = fixedLitTable, fixedDistTable
			s.state = stCodes
		case 2:
			s.state = stTableSizes
		default:
			return false, corrupt("reserved block type 3")
		}
	case stStoredLength:
		if nb < 32 {
			return false, nil
		}
		n, nn := b&0xffff, b>>16&0xffff
		if n != ^nn&0xffff {
			return false, corrupt("stored block length %d does not match its complement %d", n, nn)
		}
		s.bits, s.nbits = b>>32, nb-32
		s.storedLeft = int(n)
		s.state = stStored
	case stStored:
		// Bytes already in the bit buffer come first, then the chunk's.
		for s.storedLeft > 0 && s.nbits >= 8 && s.wr < histSize {
			s.hist[s.wr] = byte(s.bits)
			s.wr++
			s.bits >>= 8
			s.nbits -= 8
			s.storedLeft--
			s.have = min(s.have+1, histSize)
		}
		if s.nbits == 0 {
			// The bit buffer may hold copies of in's next bytes (see
			// refill), which are taken from in directly now.
			s.bits = 0
			n := copy(s.hist[s.wr:], s.in[:min(len(s.in), s.storedLeft)])
			s.in = s.in[n:]
			s.wr += n
			s.storedLeft -= n
			s.have = min(s.have+n, histSize)
		}
		if s.storedLeft == 0 {
			s.endBlock()
			return true, nil
		}
		if s.wr == histSize {
			return true, nil
		}
		return !s.consumed(), nil
	case stTableSizes:
		if nb < 14 {
			return false, nil
		}
		s.hlit, s.hdist, s.hclen = int(b&31)+257, int(b>>5&31)+1, int(b>>10&15)+4
		if s.hlit > 286 || s.hdist > 30 {
			return false, corrupt("%d literal/length codes and %d distance codes, more than RFC 1951 has", s.hlit, s.hdist)
		}
		s.bits, s.nbits = b>>14, nb-14
		s.clen = [19]uint8{}
		s.idx = 0
		s.state = stClenLengths
	case stClenLengths:
		for ; s.idx < s.hclen; s.idx++ {
			if s.nbits < 3 {
				if s.refill(); s.nbits < 3 {
					return false, nil
				}
			}
			s.clen[clenOrder[s.idx]] = uint8(s.bits & 7)
			s.bits, s.nbits = s.bits>>3, s.nbits-3
		}
		// The code length code is decoded with the distance table,
		// which is built only after it is done with.
		if err := s.dynDist.build(s.clen[:]); err != nil {
			return false, corrupt("code length code: %w", err)
		}
		s.idx = 0
		s.state = stCodeLengths
	case stCodeLengths:
		return s.codeLengths()
	case stCodes:
		return s.codes()
	case stAfterFinal:
		// RFC 7692 7.2.3.3 lets a message end with a final block; what
		// follows it in the message, the tail included, is not data.
		s.in, s.bits, s.nbits = nil, 0, 0
		if s.last {
			s.tail = true
		}
		return false, nil
	}
	return true, nil
}

// codeLengths reads the literal/length and distance code lengths of a
// dynamic block, one code length symbol (with its repeat bits) per step.
func (s *stream) codeLengths() (bool, error) {
	total := s.hlit + s.hdist
	for s.idx < total {
		if s.nbits < 14 {
			s.refill()
		}
		b, nb := s.bits, s.nbits
		sym, n := s.dynDist.decode(b, nb)
		if sym < 0 {
			return false, corrupt("invalid code length code")
		}
		if n == 0 {
			return false, nil
		}
		b, nb = b>>n, nb-n
		val, rep := uint8(sym), 1
		var extra uint
		switch sym {
		case 16:
			if s.idx == 0 {
				return false, corrupt("code length repeated before the first")
			}
			val, extra, rep = s.lens[s.idx-1], 2, 3
		case 17:
			val, extra, rep = 0, 3, 3
		case 18:
			val, extra, rep = 0, 7, 11
		}
		if nb < extra {
			return false, nil
		}
		rep += int(b & (1<<extra - 1))
		b, nb = b>>extra, nb-extra
		if s.idx+rep > total {
			return false, corrupt("code lengths repeated past the %d codes", total)
		}
		for range rep {
			s.lens[s.idx] = val
			s.idx++
		}
		s.bits, s.nbits = b, nb
	}
	if s.lens[256] == 0 {
		return false, corrupt("no code for the end of the block")
	}
	if err := s.dynLit.build(s.lens[:s.hlit]); err != nil {
		return false, corrupt("literal/length code: %w", err)
	}
	if err := s.dynDist.build(s.lens[s.hlit:total]); err != nil {
		return false, corrupt("distance code: %w", err)
	}
	s.lit, s.dist = &s.dynLit, &s.dynDist
	s.state = stCodes
	return true, nil
}

// codes decodes literals and matches into the ring until the block ends,
// the ring's end is reached, or the input runs out.
func (s *stream) codes() (bool, error) {
	hist := &s.hist
	wr := s.wr
	lit, dist := s.lit, s.dist
	for {
		// A match cut short by the ring's end goes on first.
		for s.copyLen > 0 {
			if wr == histSize {
				s.advance(wr)
				return true, nil
			}
			src := wr - s.copyDist
			if src < 0 {
				src += histSize
			}
			// Copy no more than the distance at once, so that an
			// overlapping match repeats what it has just written.
			n := min(s.copyLen, histSize-wr, s.copyDist, histSize-src)
			copy(hist[wr:wr+n], hist[src:src+n])
			wr += n
			s.copyLen -= n
		}
		if wr == histSize {
			s.advance(wr)
			return true, nil
		}
		if s.nbits < 48 {
			if len(s.in) >= 8 {
				// refill's fast path, written out here to be inlined.
				s.bits |= binary.LittleEndian.Uint64(s.in) << s.nbits
				k := (63 - s.nbits) >> 3
				s.in = s.in[k:]
				s.nbits += k << 3
			} else {
				s.refill()
			}
		}
		b, nb := s.bits, s.nbits
		var sym int
		var n uint
		if e := lit.fast[b&(1<<fastBits-1)]; e != 0 && uint(e&15) <= nb {
			sym, n = int(e>>4), uint(e&15) // decode's fast path
		} else {
			sym, n = lit.decode(b, nb)
		}
		switch {
		case sym < 0:
			return false, corrupt("invalid literal/length code")
		case n == 0:
			s.advance(wr)
			return false, nil
		case sym < 256:
			hist[wr] = byte(sym)
			wr++
			s.bits, s.nbits = b>>n, nb-n
			continue
		case sym == 256:
			s.bits, s.nbits = b>>n, nb-n
			s.advance(wr)
			s.endBlock()
			return true, nil
		case sym > 285:
			return false, corrupt("invalid length symbol %d", sym)
		}
		b, nb = b>>n, nb-n
		sym -= 257
		extra := uint(lenExtraOf[sym])
		if nb < extra {
			s.advance(wr)
			return false, nil
		}
		length := int(lenBaseOf[sym]) + int(b&(1<<extra-1))
		b, nb = b>>extra, nb-extra
		var dsym int
		if e := dist.fast[b&(1<<fastBits-1)]; e != 0 && uint(e&15) <= nb {
			dsym, n = int(e>>4), uint(e&15)
		} else {
			dsym, n = dist.decode(b, nb)
		}
		switch {
		case dsym < 0:
			return false, corrupt("invalid distance code")
		case n == 0:
			s.advance(wr)
			return false, nil
		case dsym >= 30:
			return false, corrupt("invalid distance symbol %d", dsym)
		}
		b, nb = b>>n, nb-n
		extra = uint(distExtraOf[dsym])
		if nb < extra {
			s.advance(wr)
			return false, nil
		}
		dist := int(distBaseOf[dsym]) + int(b&(1<<extra-1))
		b, nb = b>>extra, nb-extra
		if dist > min(s.have+wr-s.wr, histSize) {
			return false, corrupt("distance %d reaches before the start of the history", dist)
		}
		s.bits, s.nbits = b, nb
		s.copyLen, s.copyDist = length, dist
	}
}

// advance takes the output written up to wr into the ring's count.
func (s *stream) advance(wr int) {
	s.have = min(s.have+wr-s.wr, histSize)
	s.wr = wr
}

// endBlock moves on from a block that ended.
func (s *stream) endBlock() {
	if s.final {
		s.state = stAfterFinal
	} else {
		s.state = stBlockHeader
	}
}
