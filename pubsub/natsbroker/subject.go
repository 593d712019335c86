package natsbroker

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// topicMark starts the token that carries a topic, so that the token of
// the empty topic is not empty.
const topicMark = "t"

// subjectOf returns the NATS subject that carries topic under prefix (see
// the package doc).
func subjectOf(prefix, topic string) string {
	enc := base64.RawURLEncoding
	var b strings.Builder
	b.Grow(len(prefix) + 1 + len(topicMark) + enc.EncodedLen(len(topic)))
	b.WriteString(prefix)
	b.WriteByte('.')
	b.WriteString(topicMark)
	w := base64.NewEncoder(enc, &b)
	w.Write([]byte(topic))
	w.Close()
	return b.String()
}

// topicOf returns the topic that subject carries under prefix, or an error
// if subject is not one subjectOf makes.
func topicOf(prefix, subject string) (string, error) {
	tok, ok := strings.CutPrefix(subject, prefix+"."+topicMark)
	if !ok {
		return "", fmt.Errorf("natsbroker: subject %q is not under prefix %q", subject, prefix)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil {
		return "", fmt.Errorf("natsbroker: subject %q does not carry a topic: %w", subject, err)
	}
	return string(b), nil
}

// checkPrefix accepts a prefix of one or more tokens separated by '.',
// each non-empty and free of wildcards, white space and control bytes.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("natsbroker: empty subject prefix")
	}
	for tok := range strings.SplitSeq(prefix, ".") {
		if tok == "" {
			return fmt.Errorf("natsbroker: subject prefix %q has an empty token", prefix)
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; c <= ' ' || c == '*' || c == '>' || c >= 0x7f {
				return fmt.Errorf("natsbroker: subject prefix %q has byte %q, not allowed in a NATS subject token", prefix, c)
			}
		}
	}
	return nil
}
