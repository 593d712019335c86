package rally

// Corks. A cork gathers a connection's sends so that they leave together,
// in one system call where the kernel takes them, when it ends. A cork
// belongs to the goroutine that took it: only that goroutine's sends are
// gathered, and a send from any other goroutine goes out at once (with
// whatever was gathered before it, which keeps the order). So the automatic
// cork around a Server's read batch holds the callbacks' own sends, never
// another goroutine's.
//
// Bytes held by a cork are accounted apart from backpressure: they count in
// BufferedAmount, but not against BufferLimit, and a send into a cork
// reports Sent unless the queue is blocked.

// corkState is a connection's corks, guarded by the write lock.
type corkState struct {
	holders [4]corkHolder // goroutines holding this connection's own corks
	joined  []joinedCork  // other connections' corks this one joined (JoinCork); its backing array is kept
	peers   []joinedPeer  // connections that joined this one's corks
	spare   []joinedPeer  // peers' backing array, kept between batches
}

type corkHolder struct {
	g        uintptr
	depth    int
	callback bool // the cork rally takes around a callback (OnDrain)
}

type joinedCork struct {
	origin *Conn
	g      uintptr
}

type joinedPeer struct {
	c *Conn
	g uintptr
}

// Cork runs f with the sends this goroutine makes on c gathered: they
// leave together, in one system call where the kernel takes them, when f
// returns. A cork gathers at most 256 KiB: sends past that go out at once
// (in order), as does a frame of 64 KiB or more sent while the cork holds
// nothing (written from the caller's bytes, not copied). Sends from other
// goroutines are not held. A blocking Write or a Close that waits for the
// handshake inside f flushes what was gathered first, so it cannot wait on
// itself.
// Corks nest. A Server corks automatically around the callbacks of each
// batch of frames it reads.
func (c *Conn) Cork(f func()) {
	c.corkBegin()
	defer c.corkEnd()
	f()
}

func (c *Conn) corkBegin() { c.corkAround(false) }

// corkCallback is corkBegin around a callback that may run off the reading
// goroutine (OnDrain): a Close inside it then sends and returns as from
// any callback (see inCallbackCork).
func (c *Conn) corkCallback() { c.corkAround(true) }

func (c *Conn) corkAround(callback bool) {
	g := currentG()
	c.wr.mu.Lock()
	k := c.corksLocked()
	free := -1
	for i := range k.holders {
		h := &k.holders[i]
		if h.depth > 0 && h.g == g {
			h.depth++
			c.wr.mu.Unlock()
			return
		}
		if h.depth == 0 && free < 0 {
			free = i
		}
	}
	if free >= 0 {
		k.holders[free] = corkHolder{g: g, depth: 1, callback: callback}
	}
	// Else more goroutines cork this connection at once than it tracks:
	// this one's sends simply go out at once.
	c.wr.mu.Unlock()
}

func (c *Conn) corkEnd() {
	g := currentG()
	c.wr.mu.Lock()
	k := c.wr.corks
	if k == nil {
		c.wr.mu.Unlock()
		return
	}
	var ended bool
	for i := range k.holders {
		h := &k.holders[i]
		if h.depth > 0 && h.g == g {
			h.depth--
			ended = h.depth == 0
			break
		}
	}
	if !ended {
		c.wr.mu.Unlock()
		return
	}
	// The peers that joined this goroutine's cork go now, even if this
	// connection itself joined another's (two publishers feeding each
	// other must not hold each other forever).
	var released []joinedPeer
	if len(k.peers) > 0 {
		released = k.spare[:0]
		k.spare = nil
		keep := k.peers[:0]
		for _, p := range k.peers {
			if p.g == g {
				released = append(released, p)
			} else {
				keep = append(keep, p)
			}
		}
		clear(k.peers[len(keep):])
		k.peers = keep
	}
	c.uncorkedLocked()
	c.unlockWrite()
	if released == nil {
		return
	}
	for i, p := range released {
		p.c.leaveCork(c, p.g)
		released[i] = joinedPeer{}
	}
	c.wr.mu.Lock()
	if k.spare == nil {
		k.spare = released[:0] // no allocation per batch
	}
	c.wr.mu.Unlock()
}

// corksLocked returns the connection's cork state, made the first time a
// cork is taken (a connection that is never corked does without it).
func (c *Conn) corksLocked() *corkState {
	if c.wr.corks == nil {
		c.wr.corks = new(corkState)
	}
	return c.wr.corks
}

// holdsCorkLocked reports whether goroutine g holds one of the
// connection's own corks.
func (c *Conn) holdsCorkLocked(g uintptr) bool {
	if c.wr.corks == nil {
		return false
	}
	for _, h := range c.wr.corks.holders {
		if h.depth > 0 && h.g == g {
			return true
		}
	}
	return false
}

// inCallbackCork reports whether the calling goroutine runs a callback
// inside the cork rally took for it (corkCallback).
func (c *Conn) inCallbackCork() bool {
	g := currentG()
	c.wr.mu.Lock()
	defer c.wr.mu.Unlock()
	if c.wr.corks == nil {
		return false
	}
	for _, h := range c.wr.corks.holders {
		if h.depth > 0 && h.g == g {
			return h.callback
		}
	}
	return false
}

// corkedLocked reports whether sends from goroutine g are gathered now: by
// one of the connection's own corks, by a cork it joined, or by the turn
// of the event loop g runs.
func (c *Conn) corkedLocked(g uintptr) bool {
	if c.holdsCorkLocked(g) {
		return true
	}
	if k := c.wr.corks; k != nil {
		for i := range k.joined {
			if k.joined[i].g == g {
				return true
			}
		}
	}
	// An event loop's turn gathers its callbacks' sends to every
	// connection (see loop_linux.go).
	return c.gatherLocked(g)
}

// anyCorkLocked reports whether any cork holds the connection.
func (c *Conn) anyCorkLocked() bool {
	k := c.wr.corks
	if k == nil {
		return false
	}
	for i := range k.holders {
		if k.holders[i].depth > 0 {
			return true
		}
	}
	return len(k.joined) > 0
}

// uncorkedLocked writes what was gathered once no cork holds it any more.
func (c *Conn) uncorkedLocked() {
	if !c.anyCorkLocked() && c.wr.err == nil && c.wr.q.queued() > 0 {
		c.kickLocked(false)
		if c.wr.flushing {
			c.wr.drainArmed = true
		}
	}
}

// JoinCork corks c until origin's current cork ends, if the calling
// goroutine holds a cork of origin right now (as it does inside origin's
// Server callbacks), and reports whether it did. A batch of messages that
// origin's callbacks send to many connections (a pub/sub publish) then
// reaches each of them in one write instead of one write per message. Only
// the calling goroutine's sends to c are gathered; c stays writable: a
// blocking Write on c flushes first. A connection whose queue waits for
// its peer (the kernel refused bytes) is not joined: its sends wait in its
// queue anyway, with no write attempt. On an event loop's goroutine, in
// its turn (origin's callbacks on a Server with EventLoop), it joins
// nothing and reports false: the turn gathers every send of its
// callbacks, to any connection, and writes each connection once when it
// ends.
func (c *Conn) JoinCork(origin *Conn) bool {
	if origin == nil || origin == c || c.waiting.Load() > 0 {
		return false
	}
	g := currentG()
	if inLoopTurn(g) {
		return false
	}
	origin.wr.mu.Lock()
	corked := origin.holdsCorkLocked(g)
	origin.wr.mu.Unlock()
	if !corked {
		return false
	}
	c.wr.mu.Lock()
	if c.wr.err != nil || c.wr.q.blocked {
		// A queue the peer is not taking bytes from gathers anyway: the
		// sends join it without a write (and without the batch's work).
		c.unlockWrite()
		return false
	}
	k := c.corksLocked()
	for _, j := range k.joined {
		if j.origin == origin && j.g == g {
			// Joined already: it flushes when this batch ends.
			c.unlockWrite()
			return true
		}
	}
	// Joining several origins' batches at once (publishers whose batches
	// overlap) makes a receiver take one write for all of them.
	k.joined = append(k.joined, joinedCork{origin: origin, g: g})
	c.unlockWrite()
	origin.wr.mu.Lock()
	if !origin.holdsCorkLocked(g) {
		origin.wr.mu.Unlock()
		c.leaveCork(origin, g)
		return false
	}
	oc := origin.corksLocked()
	oc.peers = append(oc.peers, joinedPeer{c: c, g: g})
	origin.wr.mu.Unlock()
	return true
}

// leaveCork ends the cork JoinCork took for origin's goroutine g.
func (c *Conn) leaveCork(origin *Conn, g uintptr) {
	c.wr.mu.Lock()
	k := c.corksLocked()
	for i, j := range k.joined {
		if j.origin == origin && j.g == g {
			last := len(k.joined) - 1
			k.joined[i] = k.joined[last]
			k.joined[last] = joinedCork{}
			k.joined = k.joined[:last]
			break
		}
	}
	c.uncorkedLocked()
	c.unlockWrite()
}
