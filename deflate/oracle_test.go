package deflate

import (
	"errors"
	"fmt"
)

// oracleInflate is a small DEFLATE decoder written from RFC 1951 for the
// tests, sharing nothing with the code under test: it decodes stream (one
// or more messages, each followed by its tail) after history, and reports
// the farthest back any match reached, which is what a sender's window
// bits promise. It stops at the end of the input when that falls on a
// block boundary, or after a final block. It is slow, and meant to be.
func oracleInflate(history, stream []byte) (out []byte, maxDist int, err error) {
	r := bitReader{in: stream}
	buf := append([]byte(nil), history...)
	for {
		if r.pos >= len(r.in) {
			break
		}
		final, err := r.bits(1)
		if err != nil {
			return nil, 0, err
		}
		typ, err := r.bits(2)
		if err != nil {
			return nil, 0, err
		}
		switch typ {
		case 0:
			r.align()
			if r.pos+4 > len(r.in) {
				return nil, 0, errors.New("oracle: stored block header cut short")
			}
			n := int(r.in[r.pos]) | int(r.in[r.pos+1])<<8
			nn := int(r.in[r.pos+2]) | int(r.in[r.pos+3])<<8
			r.pos += 4
			if n != ^nn&0xffff {
				return nil, 0, errors.New("oracle: stored block length check failed")
			}
			if r.pos+n > len(r.in) {
				return nil, 0, errors.New("oracle: stored block cut short")
			}
			buf = append(buf, r.in[r.pos:r.pos+n]...)
			r.pos += n
		case 1:
			buf, maxDist, err = r.codes(buf, &fixedLit, &fixedDist, maxDist)
		case 2:
			var lit, dist huffman
			if lit, dist, err = r.dynamic(); err == nil {
				buf, maxDist, err = r.codes(buf, &lit, &dist, maxDist)
			}
		default:
			return nil, 0, errors.New("oracle: reserved block type")
		}
		if err != nil {
			return nil, 0, err
		}
		if final == 1 {
			break
		}
	}
	return buf[len(history):], maxDist, nil
}

type bitReader struct {
	in  []byte
	pos int  // next byte
	bit uint // bits of in[pos] already used
}

func (r *bitReader) bits(n int) (int, error) {
	v := 0
	for i := range n {
		if r.pos >= len(r.in) {
			return 0, errors.New("oracle: out of input")
		}
		b := int(r.in[r.pos]>>r.bit) & 1
		v |= b << i
		r.bit++
		if r.bit == 8 {
			r.bit = 0
			r.pos++
		}
	}
	return v, nil
}

func (r *bitReader) align() {
	if r.bit != 0 {
		r.bit = 0
		r.pos++
	}
}

// huffman is a canonical code: how many codes of each length, and the
// symbols in code order.
type huffman struct {
	count  [16]int
	symbol []int
}

func newHuffman(lengths []int) huffman {
	var h huffman
	for _, l := range lengths {
		h.count[l]++
	}
	h.count[0] = 0
	var offs [16]int
	for l := 1; l < 16; l++ {
		offs[l] = offs[l-1] + h.count[l-1]
	}
	h.symbol = make([]int, len(lengths))
	for s, l := range lengths {
		if l != 0 {
			h.symbol[offs[l]] = s
			offs[l]++
		}
	}
	return h
}

func (r *bitReader) decode(h *huffman) (int, error) {
	code, first, index := 0, 0, 0
	for l := 1; l < 16; l++ {
		b, err := r.bits(1)
		if err != nil {
			return 0, err
		}
		code |= b
		count := h.count[l]
		if code-first < count {
			return h.symbol[index+code-first], nil
		}
		index += count
		first = (first + count) << 1
		code <<= 1
	}
	return 0, errors.New("oracle: invalid huffman code")
}

var (
	lengthBase  = [29]int{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]int{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]int{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

	fixedLit, fixedDist = func() (huffman, huffman) {
		var l [288]int
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
		var d [30]int
		for i := range d {
			d[i] = 5
		}
		return newHuffman(l[:]), newHuffman(d[:])
	}()
)

// codes decodes one Huffman-coded block into buf.
func (r *bitReader) codes(buf []byte, lit, dist *huffman, maxDist int) ([]byte, int, error) {
	for {
		sym, err := r.decode(lit)
		if err != nil {
			return nil, 0, err
		}
		switch {
		case sym < 256:
			buf = append(buf, byte(sym))
		case sym == 256:
			return buf, maxDist, nil
		default:
			sym -= 257
			if sym >= 29 {
				return nil, 0, errors.New("oracle: invalid length symbol")
			}
			e, err := r.bits(lengthExtra[sym])
			if err != nil {
				return nil, 0, err
			}
			n := lengthBase[sym] + e
			ds, err := r.decode(dist)
			if err != nil {
				return nil, 0, err
			}
			if ds >= 30 {
				return nil, 0, errors.New("oracle: invalid distance symbol")
			}
			e, err = r.bits(distExtra[ds])
			if err != nil {
				return nil, 0, err
			}
			d := distBase[ds] + e
			if d > len(buf) {
				return nil, 0, fmt.Errorf("oracle: distance %d before the start", d)
			}
			maxDist = max(maxDist, d)
			for range n {
				buf = append(buf, buf[len(buf)-d])
			}
		}
	}
}

var codeOrder = [19]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

func (r *bitReader) dynamic() (huffman, huffman, error) {
	var h [3]int
	for i, n := range []int{5, 5, 4} {
		v, err := r.bits(n)
		if err != nil {
			return huffman{}, huffman{}, err
		}
		h[i] = v
	}
	nlen, ndist, ncode := h[0]+257, h[1]+1, h[2]+4
	var cl [19]int
	for i := range ncode {
		v, err := r.bits(3)
		if err != nil {
			return huffman{}, huffman{}, err
		}
		cl[codeOrder[i]] = v
	}
	clh := newHuffman(cl[:])
	lengths := make([]int, 0, nlen+ndist)
	for len(lengths) < nlen+ndist {
		sym, err := r.decode(&clh)
		if err != nil {
			return huffman{}, huffman{}, err
		}
		rep, val := 1, sym
		switch sym {
		case 16:
			if len(lengths) == 0 {
				return huffman{}, huffman{}, errors.New("oracle: repeat with no length")
			}
			val = lengths[len(lengths)-1]
			e, err := r.bits(2)
			rep = 3 + e
			if err != nil {
				return huffman{}, huffman{}, err
			}
		case 17:
			e, err := r.bits(3)
			rep, val = 3+e, 0
			if err != nil {
				return huffman{}, huffman{}, err
			}
		case 18:
			e, err := r.bits(7)
			rep, val = 11+e, 0
			if err != nil {
				return huffman{}, huffman{}, err
			}
		}
		for range rep {
			lengths = append(lengths, val)
		}
	}
	if len(lengths) > nlen+ndist {
		return huffman{}, huffman{}, errors.New("oracle: too many lengths")
	}
	return newHuffman(lengths[:nlen]), newHuffman(lengths[nlen:]), nil
}
