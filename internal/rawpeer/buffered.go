package rawpeer

// Buffered returns how many bytes the peer has read from the connection
// and not yet returned: the rest of what arrived together with the last
// frame read. A test peer uses it to act per read batch, as an
// implementation that answers once per batch does.
func (p *Peer) Buffered() int { return p.br.Buffered() }
