package natsbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// historyOn opens a History with opts on a new broker connected to url,
// sending what it delivers to the returned channel.
func historyOn(t *testing.T, url string, opts HistoryOptions) (*History, chan Record) {
	t.Helper()
	b, err := New(url)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan Record, 4096)
	h, err := b.OpenHistory(context.Background(), opts, func(r Record) { ch <- r }, func(err error) { t.Errorf("history: %v", err) })
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		b.Close()
	})
	return h, ch
}

func jetStreamServer(t *testing.T) *Embedded {
	t.Helper()
	e, err := StartEmbedded("127.0.0.1:0", nil, "", WithJetStream(t.TempDir(), ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func TestOpenHistoryWithoutJetStreamSaysSo(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	b, err := New(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.OpenHistory(context.Background(), HistoryOptions{}, func(Record) {}, nil)
	if !errors.Is(err, ErrNoJetStream) {
		t.Fatalf("OpenHistory: %v, want ErrNoJetStream", err)
	}
}

func TestPublishesFromTwoNodesOnOneTopicEachNameTheirPredecessor(t *testing.T) {
	e := jetStreamServer(t)
	opts := HistoryOptions{MaxPerTopic: 10000}
	h1, got := historyOn(t, e.ClientURL(), opts)
	h2, _ := historyOn(t, e.ClientURL(), opts)
	const n = 150
	var wg sync.WaitGroup
	for i, h := range []*History{h1, h2} {
		wg.Go(func() {
			for j := range n {
				// Another topic between, so that the topic's sequences
				// are not contiguous.
				if _, err := h.Publish(context.Background(), "t", fmt.Appendf(nil, `"%d-%d"`, i, j), false); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				if _, err := h.Publish(context.Background(), fmt.Sprintf("other%d", i), []byte(`0`), false); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	recs, top, err := h1.Since(context.Background(), "t", 0, h1.Epoch(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2*n || top != recs[len(recs)-1].Seq {
		t.Fatalf("Since(0): %d records up to %d, want %d", len(recs), top, 2*n)
	}
	for i, r := range recs {
		want := uint64(0)
		if i > 0 {
			want = recs[i-1].Seq
		}
		if r.Prev != want || r.Topic != "t" {
			t.Fatalf("record %d: %+v, want its predecessor %d", i, r, want)
		}
	}
	// The live delivery has the same order.
	i := 0
	for i < len(recs) {
		r := <-got
		if r.Topic != "t" {
			continue
		}
		if r.Seq != recs[i].Seq || string(r.Data) != string(recs[i].Data) {
			t.Fatalf("delivery %d: %+v, history has %+v", i, r, recs[i])
		}
		i++
	}
}

func TestSinceReplaysOrSaysWhyNot(t *testing.T) {
	e := jetStreamServer(t)
	h, _ := historyOn(t, e.ClientURL(), HistoryOptions{MaxPerTopic: 5})
	ctx := context.Background()
	var seqs []uint64
	for i := range 10 {
		s, err := h.Publish(ctx, "t", fmt.Appendf(nil, "%d", i), false)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
		if _, err := h.Publish(ctx, "u", []byte("0"), true); err != nil {
			t.Fatal(err)
		}
	}
	last := seqs[9]
	for _, tc := range []struct {
		name  string
		seq   uint64
		epoch string
		limit int
		n     int
		err   error
	}{
		{"trimmed by the size limit", seqs[3], h.Epoch(), 100, 0, ErrExpired},
		{"the last 3", seqs[6], h.Epoch(), 100, 3, nil},
		{"between two of the topic", seqs[6] + 1, h.Epoch(), 100, 3, nil},
		{"nothing missed", last, h.Epoch(), 100, 0, nil},
		{"past the end", last + 100, h.Epoch(), 100, 0, ErrEpoch},
		{"another epoch", seqs[6], "x", 100, 0, ErrEpoch},
		{"over the limit", seqs[6], h.Epoch(), 2, 0, ErrLimit},
	} {
		recs, _, err := h.Since(ctx, "t", tc.seq, tc.epoch, tc.limit)
		if !errors.Is(err, tc.err) || len(recs) != tc.n {
			t.Errorf("%s: %d records, %v; want %d, %v", tc.name, len(recs), err, tc.n, tc.err)
			continue
		}
		for i, r := range recs {
			if r.Seq != seqs[10-tc.n+i] {
				t.Errorf("%s: record %d at %d, want %d", tc.name, i, r.Seq, seqs[10-tc.n+i])
			}
		}
	}
}
