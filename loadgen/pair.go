package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// The fast pair of adversary and h2-slow-read (a publisher flooding
// floodTopic, a subscriber reading it) in a process of its own: `rally
// bench SCENARIO URL --duration D` started again with pairEnv set. Run in
// the attacking process, the pair shared its scheduler with the attack's
// thousands of goroutines (a reconnect storm dials thousands of times a
// second), so that its rate measured the attacker as much as the server.
// The pair process writes a pairLine every pairTick and one for each
// answer; the run that started it reads the counts as its own.

// pairEnv, set in its environment, makes `rally bench` the pair process.
const pairEnv = "RALLY_BENCH_PAIR"

// pairTick is how often the pair process reports its counts.
const pairTick = 20 * time.Millisecond

// pairLine is one line of the pair process.
type pairLine struct {
	Ready     bool   `json:"ready,omitempty"` // the pair is connected: the flood runs
	Delivered int64  `json:"delivered"`
	Published int64  `json:"published"`
	Answer    string `json:"answer,omitempty"`
}

// runPair is the pair process: it connects the pair to cfg.URL and
// reports its counts until ctx ends or cfg.Duration has passed (the run
// that started it kills it when it is done with it).
func runPair(ctx context.Context, cfg HostileConfig, stdout io.Writer) int {
	t, ctx, stop, ok := helperStart(ctx, cfg, stdout)
	if !ok {
		return 1
	}
	defer stop()
	emit := lineWriter[pairLine](stdout)
	h := &hostileRun{cfg: cfg, t: t, res: &HostileResult{Answers: map[string]int64{}}}
	h.relay = func(what string) { emit(pairLine{Answer: what}) }
	f := h.fastPair(ctx)
	if f == nil {
		return 1
	}
	defer f.close()
	emit(pairLine{Ready: true})
	tick := time.NewTicker(pairTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			emit(pairLine{Delivered: f.delivered.Load(), Published: f.published.Load()})
			return 0
		case <-tick.C:
			emit(pairLine{Delivered: f.delivered.Load(), Published: f.published.Load()})
		}
	}
}

// errPairNotConnected: the pair process ran, and could not connect the
// pair (its answers say why).
var errPairNotConnected = errors.New("it ended without connecting the pair")

// pairProcess starts the pair process and returns a fastSub whose counts
// follow the process's, once it says the pair is connected. It returns
// an error, having started nothing that lasts, if the process could not
// be started, or ended without connecting the pair: errPairNotConnected
// if it said why (its answers are recorded), and the caller connects no
// pair; another if it said nothing, and the caller connects the pair
// here.
func (h *hostileRun) pairProcess(ctx context.Context) (*fastSub, error) {
	cmd, out, err := helperProcess(h.cfg, h.cfg.URL, pairEnv)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	unhook := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	f := &fastSub{h: h, stop: stop}
	ready := make(chan error, 1)
	f.wg.Go(func() {
		defer unhook()
		sc := bufio.NewScanner(out)
		said, spoke := false, false
		for sc.Scan() {
			var l pairLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			spoke = true
			switch {
			case l.Answer != "":
				h.answer(l.Answer)
			case l.Ready:
				said = true
				ready <- nil
			default:
				f.delivered.Store(l.Delivered)
				f.published.Store(l.Published)
			}
		}
		werr := cmd.Wait()
		switch {
		case said:
		case spoke:
			ready <- errPairNotConnected
		default:
			ready <- fmt.Errorf("it ended without a word (%v)", werr)
		}
	})
	if err := <-ready; err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}
