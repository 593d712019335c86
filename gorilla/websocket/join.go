package websocket

import (
	"io"
	"strings"
)

// JoinMessages returns a reader of the messages read from c, one after the
// other, each followed by term. Its errors are those of NextReader.
func JoinMessages(c *Conn, term string) io.Reader {
	return &joinReader{c: c, term: term}
}

type joinReader struct {
	c    *Conn
	term string
	r    io.Reader
}

func (j *joinReader) Read(p []byte) (int, error) {
	if j.r == nil {
		_, r, err := j.c.NextReader()
		if err != nil {
			return 0, err
		}
		j.r = r
		if j.term != "" {
			j.r = io.MultiReader(r, strings.NewReader(j.term))
		}
	}
	n, err := j.r.Read(p)
	if err == io.EOF {
		err = nil
		j.r = nil
	}
	return n, err
}
