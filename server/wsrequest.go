package server

import (
	"encoding/json"

	"github.com/rallyws/rally/internal/jsonscan"
)

// decodeRequest decodes one /ws message into req. encoding/json's rules
// are the protocol's (keys matched without regard to case, escapes, unknown
// keys ignored, the last of twice the same key wins), but a request as
// clients write it (an object of the keys type, topic, data, id and self,
// each once, type one of the protocol's and topic without escapes) is read
// without encoding/json, which allocates about seven times per request:
// only the topic is allocated then. req.Data and req.ID then point into
// p, like p valid during the Message callback only: whoever keeps them
// past it copies them.
func decodeRequest(p []byte, req *request) error {
	if quickRequest(p, req) {
		return nil
	}
	var r request
	err := json.Unmarshal(p, &r)
	*req = r
	return err
}

// quickRequest decodes p into req if p is a request of the usual shape
// (see decodeRequest); it reports false, req left in any state, for
// anything else, valid or not.
func quickRequest(p []byte, req *request) bool {
	*req = request{}
	i := jsonscan.SkipSpace(p, 0)
	if i == len(p) || p[i] != '{' {
		return false
	}
	i = jsonscan.SkipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		return jsonscan.SkipSpace(p, i+1) == len(p)
	}
	var seen uint8
	for {
		end := plainStringEnd(p, i)
		if end < 0 {
			return false
		}
		key := p[i+1 : end-1]
		i = jsonscan.SkipSpace(p, end)
		if i == len(p) || p[i] != ':' {
			return false
		}
		i = jsonscan.SkipSpace(p, i+1)
		var bit uint8
		switch string(key) {
		case "type":
			bit = 1
			if end = plainStringEnd(p, i); end < 0 {
				return false
			}
			switch string(p[i+1 : end-1]) {
			case "subscribe":
				req.Type = "subscribe"
			case "unsubscribe":
				req.Type = "unsubscribe"
			case "publish":
				req.Type = "publish"
			case "presence":
				req.Type = "presence"
			default:
				return false // its error names it: encoding/json's string
			}
		case "topic":
			bit = 2
			if end = plainStringEnd(p, i); end < 0 {
				return false
			}
			req.Topic = string(p[i+1 : end-1])
		case "data", "id":
			bit = 4
			if key[0] == 'i' {
				bit = 8
			}
			if end = jsonscan.ValueEnd(p, i); end < 0 || !json.Valid(p[i:end]) {
				return false
			}
			if bit == 4 {
				req.Data = p[i:end:end]
			} else {
				req.ID = p[i:end:end]
			}
		case "self":
			bit = 16
			switch {
			case hasWord(p[i:], "true"):
				req.Self, end = true, i+4
			case hasWord(p[i:], "false"):
				end = i + 5
			default:
				return false
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		i = jsonscan.SkipSpace(p, end)
		if i == len(p) {
			return false
		}
		switch p[i] {
		case ',':
			i = jsonscan.SkipSpace(p, i+1)
		case '}':
			return jsonscan.SkipSpace(p, i+1) == len(p)
		default:
			return false
		}
	}
}

// plainStringEnd returns the index just past the JSON string at p[i], or
// -1 unless it is a string of printable ASCII without escapes (which reads
// as it is written).
func plainStringEnd(p []byte, i int) int {
	if i >= len(p) || p[i] != '"' {
		return -1
	}
	for j := i + 1; j < len(p); j++ {
		switch c := p[j]; {
		case c == '"':
			return j + 1
		case c == '\\' || c < 0x20 || c > 0x7e:
			return -1
		}
	}
	return -1
}

// hasWord reports whether p starts with the literal w.
func hasWord(p []byte, w string) bool {
	return len(p) >= len(w) && string(p[:len(w)]) == w
}
