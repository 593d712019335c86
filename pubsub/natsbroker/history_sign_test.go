package natsbroker

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestHistoryWithAClusterSecretDropsAndCountsRecordsWrittenStraightIntoTheStream(t *testing.T) {
	e := jetStreamServer(t)
	ctx := context.Background()
	secret := []byte("a cluster secret of 32 bytes....")
	b, err := New(e.ClientURL(), WithClusterSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make(chan Record, 16)
	h, err := b.OpenHistory(ctx, HistoryOptions{MaxPerTopic: 100}, func(r Record) { got <- r }, func(err error) { t.Errorf("history: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	one, err := h.Publish(ctx, "t", []byte(`"one"`), false)
	if err != nil {
		t.Fatal(err)
	}
	first := <-got

	// A client of NATS without the secret writes into the stream.
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subject := subjectOf(h.prefix, "t")
	stored, err := h.stream.GetMsg(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	wrongKey := recordMAC([]byte("another secret of 32 bytes......"), subject, stored.Header.Get(hdrPrev), "", []byte(`"forged"`))
	for _, m := range []*nats.Msg{
		{Subject: subject, Data: []byte(`"unsigned"`), Header: nats.Header{hdrPrev: {stored.Header.Get(hdrPrev)}}},
		{Subject: subject, Data: []byte(`"forged"`), Header: nats.Header{hdrPrev: {stored.Header.Get(hdrPrev)}, hdrMAC: {base64.RawURLEncoding.EncodeToString(wrongKey)}}},
		// The genuine record again.
		{Subject: subject, Data: stored.Data, Header: nats.Header{hdrPrev: {stored.Header.Get(hdrPrev)}, hdrMAC: {stored.Header.Get(hdrMAC)}}},
	} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	two, err := h.Publish(ctx, "t", []byte(`"two"`), false)
	if err != nil {
		t.Fatal(err)
	}
	second := <-got
	if string(first.Data) != `"one"` || string(second.Data) != `"two"` || second.Prev != one || second.Seq != two {
		t.Errorf("delivered %s (seq %d), then %s (seq %d, after %d); want \"one\" (%d), then \"two\" (%d) after %d",
			first.Data, first.Seq, second.Data, second.Seq, second.Prev, one, two, one)
	}
	if n := b.Stats().Forged; n != 3 {
		t.Errorf("forged %d after the live delivery, want 3", n)
	}

	recs, top, err := h.Since(ctx, "t", 0, h.Epoch(), 100)
	if err != nil || top != two || len(recs) != 2 || string(recs[0].Data) != `"one"` || string(recs[1].Data) != `"two"` {
		t.Errorf("Since(0) = %d records ending at %d, %v; want \"one\", \"two\" ending at %d", len(recs), top, err, two)
		for _, r := range recs {
			t.Logf("  %d after %d: %s", r.Seq, r.Prev, r.Data)
		}
	}
	recs, _, err = h.Since(ctx, "t", one, h.Epoch(), 100)
	if err != nil || len(recs) != 1 || string(recs[0].Data) != `"two"` {
		t.Errorf("Since(one) = %d records, %v; want \"two\"", len(recs), err)
	}
	if n := b.Stats().Forged; n != 9 {
		t.Errorf("forged %d after two recoveries over the three, want 9", n)
	}
}
