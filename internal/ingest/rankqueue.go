package ingest

// takeBudget takes the item's bytes from the shared queue budget, waiting
// (reading nothing) while other ranks' queued batches hold it.
func (r *rank) takeBudget(it *item) bool {
	took, _ := r.budget.take(r.ctx, int64(len(it.payload)+len(it.topic)), r)
	it.budget = took
	return took > 0
}

// budgetWait counts a reader about to wait for the queue budget.
func (r *rank) budgetWait() {
	r.budgetWaits.Add(1)
}

// Large messages: the queue bounds messages by count, so at most largeSlots
// of the queued ones may be largeMessage bytes or more. Memory held by a
// rank's queue is then below QueueDepth x largeMessage + largeSlots x
// maxMessageBytes, whatever the publisher sends.
const (
	largeMessage = 1 << 20
	largeSlots   = 4
)

// push queues it, blocking while the queue is full, or while it is large and
// the large message slots are taken (back-pressure on the reader, then on
// TCP, then on the engine's high-water mark).
func (r *rank) push(it item) bool {
	if len(it.payload) >= largeMessage {
		select {
		case r.large <- struct{}{}:
		case <-r.ctx.Done():
			return false
		}
	}
	select {
	case r.q <- it:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// dequeued releases the large message slot of a handled item, if it held
// one, and gives its bytes back to the queue budget: the payload is
// referenced only until it is applied.
func (r *rank) dequeued(it item) {
	if len(it.payload) >= largeMessage {
		<-r.large
	}
	r.budget.give(it.budget)
}
