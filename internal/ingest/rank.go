package ingest

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A rank follows one worker/rank of an engine. Its parts, one file each:
// the connection (rankconn.go: dial or accept, handshake, read frames), the
// queue between the readers and the applier (rankqueue.go: a bounded queue
// and the shared byte budget), the applier (rankapply.go: the sequence state
// machine's shell, applying batches and running replays), checkpoint pauses
// (rankcheckpoint.go), inexactness and capacity (rankcap.go), refusals
// (problems.go) and the status (rankstatus.go).

// item is one entry of a rank's queue: a batch, or the news that a new
// connection is up.
type item struct {
	connected bool
	seq       uint64
	topic     []byte
	payload   []byte
	budget    int64 // bytes taken from the shared queue budget
}

// rank follows one worker/rank: readers (one per live connection) check frames
// and feed a bounded queue; one applier goroutine tracks sequence numbers,
// replays gaps and applies batches in order.
type rank struct {
	worker string
	dp     uint32
	ep     Endpoint
	replay replayer // nil: the engine has no replay endpoint
	topic  []byte
	sink   sink
	log    *slog.Logger
	met    *rankMetrics // nil: no metrics
	dialer *net.Dialer
	lim    zmtpLimits
	budget *budget // shared by every rank of the Manager

	backoffMin, backoffMax time.Duration
	// catchUpInterval: at most one full catch-up per interval (<= 0: no
	// limit); lastFull is when the last one was allowed (applier's).
	catchUpInterval time.Duration
	lastFull        time.Time

	q      chan item
	large  chan struct{} // slots for queued messages of largeMessage bytes or more
	pauses chan *pause   // Checkpoint's requests, served by the applier between batches
	resume *Position     // the snapshot position the applier starts from (nil: none)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ln     net.Listener // bind mode
	// handshakes holds a slot per handshake in progress (bind mode); live
	// is set while a publisher's connection is served: one at a time.
	handshakes chan struct{}
	live       atomic.Bool

	// Status, read by Status from any goroutine.
	conns          atomic.Int32
	everConnected  atomic.Bool
	lastSeq        atomic.Uint64
	eventsApplied  atomic.Uint64
	gaps           atomic.Uint64
	replays        atomic.Uint64
	replayFailures atomic.Uint64
	restarts       atomic.Uint64
	reconnects     atomic.Uint64
	decodeErrors   atomic.Uint64
	malformed      atomic.Uint64
	dropped        atomic.Uint64
	limited        atomic.Uint64
	budgetWaits    atomic.Uint64
	restore        atomic.Uint32 // the restore's outcome + 1 (0: none decided)
	inexact        atomic.Bool   // history was lost and the blocks kept (rankcap.go)
	inexactSince   atomic.Uint64 // the first seq lost
	capBlocks      atomic.Uint64 // the capacity in router blocks (0: not known yet)
	evictions      atomic.Uint64 // claims an inexact rank dropped for its capacity
	// capFixed is the registration's capacity in router blocks (0: learn it).
	capFixed uint64
	caughtUp atomic.Bool // the first connection's catch-up is over (CaughtUp)

	// Applier state, owned by the applier goroutine.
	seq       seqState
	acts      []seqAction // the current step's actions
	replyActs []seqAction // a replay reply's, while a step's replay runs
	badActs   []seqAction // an undecodable batch's
	replayErr error       // the last replay's error, for its log line
	st        batchStats
	logLimit  rateLimit
	probs     problems
}

// listen binds (bind mode); run then starts the rank's goroutines. A worker's
// ranks all bind before any runs, so an Add that fails has applied nothing.
func (r *rank) listen(parent context.Context) error {
	r.ctx, r.cancel = context.WithCancel(parent)
	if !r.ep.Bind {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(r.ctx, r.ep.network(), r.ep.Address)
	if err != nil {
		r.cancel()
		return err
	}
	r.ln = ln
	return nil
}

func (r *rank) run() {
	r.wg.Add(2)
	if r.ln != nil {
		go r.acceptLoop()
	} else {
		go r.connectLoop()
	}
	go r.applyLoop()
}

// stop ends the rank's goroutines and waits for them, then gives back the
// queue budget of what it had queued.
func (r *rank) stop() {
	r.cancel()
	if r.ln != nil {
		r.ln.Close()
	}
	r.wg.Wait()
	for {
		select {
		case it := <-r.q:
			r.dequeued(it)
		default:
			return
		}
	}
}
