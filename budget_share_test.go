package rally

import (
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// The memory budget's charge for send queues, checked against a reference
// counter after every step of random sequences: shared frames pushed to
// the queues of several connections (two budgets, and one connection with
// none), frames copied in, partial writes, frames withdrawn, connections
// closed. A shared frame is charged once, to the budget of the queue that
// took the first reference, until the last reference is let go; each
// queue's own buffers are charged to its own budget.

type shareModel struct {
	budgets [2]*MemoryBudget
	conns   []*shareConn
	frames  [3][]byte
	refs    [3]int    // queues of connections with a budget that refer to each frame
	owner   [3]uint32 // the budget the frame is charged to while refs > 0
}

type shareConn struct {
	q       sendQueue
	budget  *MemoryBudget // nil: none
	charged int64         // the queue's own charge, as chargeQueueLocked keeps it
	seqs    []uint64      // frames pushed, not yet completed
}

func newShareModel(t *rapid.T) *shareModel {
	m := &shareModel{}
	for i := range m.budgets {
		m.budgets[i] = NewMemoryBudget(0)
	}
	for i := range m.frames {
		m.frames[i] = newSharedFrame(rapid.IntRange(refMin, 3*chunkMin).Draw(t, fmt.Sprintf("frame %d size", i)))
	}
	for i := range 4 {
		m.conns = append(m.conns, m.newConn(i))
	}
	return m
}

// newConn makes connection i's queue: the first two are charged to one
// budget, the third to the other, the fourth to none.
func (m *shareModel) newConn(i int) *shareConn {
	c := &shareConn{}
	switch i {
	case 0, 1:
		c.budget = m.budgets[0]
	case 2:
		c.budget = m.budgets[1]
	}
	if c.budget != nil {
		c.q.budget = c.budget.id
	}
	return c
}

// done is the completion of frame k (-1: a copied frame) in connection c:
// the reference counter lets go when the queue does.
func (m *shareModel) done(c *shareConn, k int, seq *uint64) func(error) {
	return func(error) {
		for i, s := range c.seqs {
			if s == *seq {
				c.seqs = append(c.seqs[:i], c.seqs[i+1:]...)
				break
			}
		}
		if k >= 0 && c.budget != nil {
			m.refs[k]--
		}
	}
}

// took updates the reference counter for frame k referred to by c.
func (m *shareModel) took(c *shareConn, k int) {
	if c.budget == nil {
		return
	}
	if m.refs[k] == 0 {
		m.owner[k] = c.budget.id
	}
	m.refs[k]++
}

// settle runs the completions and brings each queue's own charge in line,
// as unlockWrite does.
func (m *shareModel) settle() {
	for _, c := range m.conns {
		if c.q.dones != nil {
			for _, d := range c.q.dones.calls {
				d.f(d.err)
			}
			c.q.dones.calls = c.q.dones.calls[:0]
		}
		if c.budget == nil {
			continue
		}
		now := c.q.footprint()
		if now > c.charged {
			c.budget.forceCharge(MemorySendQueues, now-c.charged)
		} else {
			c.budget.release(MemorySendQueues, c.charged-now)
		}
		c.charged = now
	}
}

// check compares each budget's charge with the reference: the frames
// referred to, once each, to their owner, and each queue's own buffers,
// counted from its fields.
func (m *shareModel) check(t *rapid.T) {
	var want [2]int64
	for k, f := range m.frames {
		if m.refs[k] > 0 {
			for i, b := range m.budgets {
				if b.id == m.owner[k] {
					want[i] += int64(frameShareWords*8 + (len(f)+7)&^7)
				}
			}
		}
		if got := uint32(shareOf(f).state.Load()); int(got) != m.refs[k] {
			t.Fatalf("frame %d: %d references counted, the reference counter has %d", k, got, m.refs[k])
		}
	}
	for _, c := range m.conns {
		if c.budget == nil {
			continue
		}
		own := int64(0)
		if l := c.q.queueLane; l != nil {
			if l.buf != nil {
				own += int64(cap(*l.buf))
			}
			for i := l.first; i < len(l.recs); i++ {
				if ch := l.recs[i].chunk; ch != nil {
					own += int64(cap(*ch))
				}
			}
			if len(c.seqs) > 0 {
				// Frames wait: their records are charged too.
				own += int64(cap(l.recs) * recordSize)
			}
		}
		for i, b := range m.budgets {
			if b == c.budget {
				want[i] += own
			}
		}
	}
	for i, b := range m.budgets {
		if got := b.Stats()[MemorySendQueues].Used; got != want[i] || b.Used() != want[i] {
			t.Fatalf("budget %d charges %d for send queues (%d in all), the reference %d", i, got, b.Used(), want[i])
		}
	}
}

func TestSharedFramesAreChargedOnceByReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newShareModel(t)
		pick := func(t *rapid.T) (int, *shareConn) {
			i := rapid.IntRange(0, len(m.conns)-1).Draw(t, "conn")
			return i, m.conns[i]
		}
		t.Repeat(map[string]func(*rapid.T){
			"pushShared": func(t *rapid.T) {
				_, c := pick(t)
				k := rapid.IntRange(0, len(m.frames)-1).Draw(t, "frame")
				f := m.frames[k]
				seq := new(uint64)
				if c.q.queued() == 0 && rapid.Bool().Draw(t, "direct") {
					// A direct write that the kernel took part of.
					taken := rapid.IntRange(0, len(f)-refMin).Draw(t, "taken")
					*seq = c.q.pushTakenShare(taken, nil, f[taken:], true, shareOf(f), false, false, m.done(c, k, seq))
				} else {
					*seq = c.q.push(nil, f, false, [4]byte{}, false, true, shareOf(f), m.done(c, k, seq), false)
				}
				c.seqs = append(c.seqs, *seq)
				m.took(c, k)
			},
			"pushCopied": func(t *rapid.T) {
				_, c := pick(t)
				p := make([]byte, rapid.IntRange(1, 3*chunkMin).Draw(t, "size"))
				seq := new(uint64)
				*seq = c.q.push([]byte{0x82, 0}, p, false, [4]byte{}, false, false, nil, m.done(c, -1, seq), false)
				c.seqs = append(c.seqs, *seq)
			},
			"writePartially": func(t *rapid.T) {
				_, c := pick(t)
				if c.q.queued() == 0 {
					t.Skip("nothing queued")
				}
				c.q.advance(rapid.IntRange(1, c.q.queued()).Draw(t, "n"))
			},
			"drop": func(t *rapid.T) {
				_, c := pick(t)
				if len(c.seqs) == 0 {
					t.Skip("nothing queued")
				}
				seq := c.seqs[rapid.IntRange(0, len(c.seqs)-1).Draw(t, "which")]
				if done, ok := c.q.withdraw(seq); ok {
					done(errors.New("withdrawn"))
				}
			},
			"close": func(t *rapid.T) {
				i, c := pick(t)
				c.q.fail(errors.New("closed"))
				m.settle()
				if c.charged != 0 || len(c.seqs) != 0 {
					t.Fatalf("a closed connection's queue is charged %d with %d frames waiting", c.charged, len(c.seqs))
				}
				m.conns[i] = m.newConn(i)
			},
			"": func(t *rapid.T) {
				m.settle()
				m.check(t)
			},
		})
		for _, c := range m.conns {
			c.q.fail(errors.New("closed"))
		}
		m.settle()
		m.check(t)
		for i, b := range m.budgets {
			if b.Used() != 0 {
				t.Fatalf("budget %d still charges %d after every connection closed", i, b.Used())
			}
		}
	})
}
