package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"

	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// Config configures a Server.
type Config struct {
	// Router scores and routes prompts, and Ingest follows workers' KV
	// event streams. Set both, or neither and call Start when they exist
	// (after the index is restored): until then every kvrouter.v1 call
	// answers Unavailable.
	Router *scoring.Router
	Ingest *ingest.Manager
	// Store keeps registrations across restarts; nil keeps them in memory.
	Store RegistryStore
	// Logger receives registry changes; nil discards.
	Logger *slog.Logger
	// Index, when set, has its size and refusals reported as
	// kvrouter_index_* metrics.
	Index *radix.Index
	// Registerer receives the RPC and index metrics; nil registers none.
	Registerer prometheus.Registerer
	// MarkSync, when set, is called after a mark is applied, and the mark
	// is answered when it returns: with replicas, once the mark's change
	// has reached the NATS server, so a replica that dies after answering
	// does not lose it (cluster.Node.Sync).
	MarkSync func(context.Context) error
}

// RegistryStore keeps registrations across restarts (see fleet.Store).
type RegistryStore = fleet.Store

// Source is where a registration came from (see fleet.Source).
type Source = fleet.Source

// Sources of registrations.
const (
	SourceConfig    = fleet.SourceConfig
	SourceAPI       = fleet.SourceAPI
	SourceDiscovery = fleet.SourceDiscovery
)

// Server implements the kvrouter.v1 Router and Registry services.
type Server struct {
	kvrouterv1.UnimplementedRouterServer
	kvrouterv1.UnimplementedRegistryServer

	// router, ingest and fleet are set once, before ready is: a call
	// that finds ready set may use them.
	router   *scoring.Router
	ingest   *ingest.Manager
	fleet    *fleet.Fleet
	ready    atomic.Bool
	store    RegistryStore
	markSync func(context.Context) error
	reg      prometheus.Registerer
	log      *slog.Logger
	metrics  *metrics

	// requests pools decoded RouteRequests for the unary Route handler
	// (routeHandler): each keeps its Prompt and token_ids memory, which the
	// codec decodes the next request into, so an 8,192-token Route
	// allocates no 32 KiB token slice.
	requests sync.Pool

	// onDecision sees every Route decision (decisionhook.go).
	onDecision DecisionHook

	// text tokenizes Prompt.text and Prompt.openai_body (text.go); nil refuses them.
	text *textModels
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if (cfg.Router == nil) != (cfg.Ingest == nil) {
		return nil, errors.New("server: set both Config.Router and Config.Ingest, or neither (and call Start)")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		store:    cfg.Store,
		markSync: cfg.MarkSync,
		reg:      cfg.Registerer,
		log:      log,
	}
	m, err := newMetrics(cfg.Registerer, s)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if cfg.Router != nil {
		if err := s.Start(cfg.Router, cfg.Ingest, cfg.Index); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Start gives the server what it serves with, once; from then on it answers
// calls. index, when not nil, has its size and refusals reported as
// kvrouter_index_* metrics.
func (s *Server) Start(router *scoring.Router, ing *ingest.Manager, index *radix.Index) error {
	if router == nil || ing == nil {
		return errors.New("server: Start needs a router and an ingest manager")
	}
	if s.ready.Load() {
		return errors.New("server: started twice")
	}
	if index != nil && s.reg != nil {
		if err := s.reg.Register(newIndexCollector(index)); err != nil {
			return fmt.Errorf("server: %w", err)
		}
	}
	f, err := fleet.New(fleet.Config{
		Router: router, Ingest: ing, Store: s.store, Logger: s.log,
		OnReject: s.metrics.reject,
		OnChange: func(n int) { s.metrics.workers.Set(float64(n)) },
		OnForget: s.metrics.forgetWorker,
	})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.router, s.ingest, s.fleet = router, ing, f
	s.ready.Store(true)
	return nil
}

// Ready reports whether Start was called.
func (s *Server) Ready() bool { return s.ready.Load() }

// RegisterServices registers the Router and Registry services on g.
func (s *Server) RegisterServices(g *grpc.Server) {
	g.RegisterService(routerServiceDesc(), s)
	kvrouterv1.RegisterRegistryServer(g, s)
}

// GRPCOptions returns the options a grpc.Server needs to serve s: its
// interceptor and its codec (proto, with a faster decoder for prompts), and
// stream workers: a pool of GOMAXPROCS goroutines that handle incoming calls
// (grpc-go starts a goroutine per call otherwise, whose stack a Route then
// grows by copying; calls past a busy pool still get one of their own).
func (s *Server) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor()),
		grpc.ForceServerCodecV2(newCodec()),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
}

// UnaryInterceptor records every RPC's latency and error code in the metrics,
// and answers the kvrouter.v1 calls with Unavailable until Start.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		var resp any
		var err error
		if s.ready.Load() || !strings.HasPrefix(info.FullMethod, "/kvrouter.v1.") {
			resp, err = handler(ctx, req)
		} else {
			err = status.Error(codes.Unavailable, notReadyMessage)
		}
		s.metrics.observe(info.FullMethod, time.Since(start), status.Code(err))
		return resp, err
	}
}

// notReadyMessage answers the kvrouter.v1 calls until Start.
const notReadyMessage = "the router is restoring its index; try again shortly"

// grpcError maps a scoring error to a gRPC status with its message.
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, scoring.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, scoring.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, scoring.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, scoring.ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, scoring.ErrResourceExhausted):
		return status.Error(codes.ResourceExhausted, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// fail is grpcError that also counts a call refused by one of the router's
// limits in kvrouter_rpc_rejected_total{reason}.
func (s *Server) fail(err error) error {
	var le *scoring.LimitError
	if errors.As(err, &le) {
		s.metrics.reject(le.Limit)
	}
	return grpcError(err)
}

func prompt(p *kvrouterv1.Prompt) (*scoring.Prompt, error) {
	sp := new(scoring.Prompt)
	if err := promptTo(sp, p); err != nil {
		return nil, err
	}
	return sp, nil
}

// promptTo converts p into sp.
func promptTo(sp *scoring.Prompt, p *kvrouterv1.Prompt) error {
	if p == nil {
		return status.Error(codes.InvalidArgument, "prompt is missing")
	}
	*sp = scoring.Prompt{
		Model:       p.GetModel(),
		Tokens:      p.GetTokenIds(),
		BlockHashes: p.GetBlockHashes(),
		LoRAName:    p.GetLoraName(),
		CacheSalt:   p.GetCacheSalt(),
	}
	for _, it := range p.GetMmItems() {
		sp.MM = append(sp.MM, scoring.MMItem{Hash: it.GetHash(), Offset: it.GetOffset(), Length: it.GetLength()})
	}
	return nil
}

// Score reports every worker/rank's prefix overlap with the prompt.
func (s *Server) Score(_ context.Context, req *kvrouterv1.ScoreRequest) (*kvrouterv1.ScoreResponse, error) {
	p := new(scoring.Prompt)
	if _, err := s.promptText(p, req.GetPrompt()); err != nil {
		return nil, err
	}
	res, err := s.router.Score(p)
	if err != nil {
		return nil, s.fail(err)
	}
	out := &kvrouterv1.ScoreResponse{
		BlockSize:    res.BlockSize,
		PromptBlocks: res.PromptBlocks,
		Scores:       make([]*kvrouterv1.WorkerScore, len(res.Scores)),
	}
	for i, ws := range res.Scores {
		out.Scores[i] = &kvrouterv1.WorkerScore{
			WorkerId:        ws.WorkerID,
			DpRank:          ws.DPRank,
			MatchedBlocks:   ws.Matched,
			DeviceBlocks:    ws.ByTier[0],
			HostBlocks:      ws.ByTier[1],
			DiskBlocks:      ws.ByTier[2],
			ExternalBlocks:  ws.ByTier[3],
			PredictedBlocks: ws.Predicted,
			CachedBlocks:    ws.Cached,
		}
	}
	return out, nil
}

// MarkPrefillDone moves a request's load from prefill to decode.
func (s *Server) MarkPrefillDone(ctx context.Context, req *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	if req.GetRequestId() == "" {
		return nil, status.Error(codes.InvalidArgument, "request_id is empty")
	}
	return s.marked(ctx, s.router.MarkPrefillDone(req.GetRequestId()))
}

// MarkFinished ends a request's load.
func (s *Server) MarkFinished(ctx context.Context, req *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	if req.GetRequestId() == "" {
		return nil, status.Error(codes.InvalidArgument, "request_id is empty")
	}
	s.checkDrift(req.GetRequestId())
	return s.marked(ctx, s.router.MarkFinished(req.GetRequestId()))
}

// marked answers a mark that err says was applied or not; an applied one
// waits for Config.MarkSync. A mark whose caller gives up during that wait
// is applied here all the same: marks are idempotent, so the caller may
// send it again, to any replica.
func (s *Server) marked(ctx context.Context, err error) (*kvrouterv1.Ack, error) {
	if err != nil {
		return &kvrouterv1.Ack{}, s.fail(err)
	}
	if s.markSync != nil {
		if err := s.markSync(ctx); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	return &kvrouterv1.Ack{}, nil
}

// RegisterWorker validates and adds a worker, and starts following its
// events. It answers after the registration is durable (see Config.Store).
// An id already registered is refused (InvalidArgument), whatever its
// source: the API creates, it does not replace.
func (s *Server) RegisterWorker(_ context.Context, req *kvrouterv1.RegisterWorkerRequest) (*kvrouterv1.RegisterWorkerResponse, error) {
	if err := s.Register(req.GetWorker(), SourceAPI, true); err != nil {
		return nil, err
	}
	return &kvrouterv1.RegisterWorkerResponse{}, nil
}

// Register is fleet.Fleet.Register with its error as a gRPC status.
func (s *Server) Register(w *kvrouterv1.Worker, source Source, store bool) error {
	return s.fleetError(s.fleet.Register(w, source, store))
}

// UnregisterWorker stops following a worker and drops its blocks and load,
// whatever its source. It answers after the removal is durable: a removal
// the store could not save leaves the worker registered.
func (s *Server) UnregisterWorker(_ context.Context, req *kvrouterv1.UnregisterWorkerRequest) (*kvrouterv1.UnregisterWorkerResponse, error) {
	id := req.GetWorkerId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "worker_id is empty")
	}
	if err := s.Unregister(id, true); err != nil {
		return nil, err
	}
	return &kvrouterv1.UnregisterWorkerResponse{}, nil
}

// Unregister is fleet.Fleet.Unregister with its error as a gRPC status.
func (s *Server) Unregister(id string, store bool) error {
	return s.fleetError(s.fleet.Unregister(id, store))
}

// Fleet is the owner of the workers' lifecycle, set by Start (nil before):
// the Registrar every other source of workers calls.
func (s *Server) Fleet() *fleet.Fleet {
	if !s.ready.Load() {
		return nil
	}
	return s.fleet
}

// fleetError is the gRPC status of a fleet error.
func (s *Server) fleetError(err error) error {
	code := codes.Internal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fleet.ErrInvalid), errors.Is(err, fleet.ErrRegistered), errors.Is(err, fleet.ErrRemoving):
		code = codes.InvalidArgument
	case errors.Is(err, fleet.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, fleet.ErrOutranked):
		code = codes.FailedPrecondition
	case errors.Is(err, fleet.ErrFull):
		code = codes.ResourceExhausted
	case errors.Is(err, fleet.ErrStore):
		code = codes.Unavailable
	default:
		return s.fail(err)
	}
	return status.Error(code, err.Error())
}

// ListWorkers pages: at most listPageSize entries (the default page size),
// and at most listPageBytes of them encoded (one entry at least), so that a
// page of any fleet fits in a client's default 4 MiB message limit.
const (
	listPageSize  = 1000
	listPageBytes = 1 << 20
)

// ListWorkers reports the workers/ranks of a model (empty: all), by worker id
// and rank, a page at a time.
func (s *Server) ListWorkers(_ context.Context, req *kvrouterv1.ListWorkersRequest) (*kvrouterv1.ListWorkersResponse, error) {
	model := req.GetModel()
	after, err := parsePageToken(req.GetPageToken(), model)
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size == 0 || size > listPageSize {
		size = listPageSize
	}
	regs := s.fleet.List(model)
	if after != nil {
		regs = slices.DeleteFunc(regs, func(r fleet.Registration) bool { return r.Worker.WorkerId < after.worker })
	}
	slices.SortFunc(regs, func(a, b fleet.Registration) int { return strings.Compare(a.Worker.WorkerId, b.Worker.WorkerId) })
	out := &kvrouterv1.ListWorkersResponse{}
	pageBytes := 0
	for _, reg := range regs {
		w := reg.Worker
		first := uint32(0)
		if after != nil && w.WorkerId == after.worker {
			first = after.rank + 1
		}
		if first >= w.DpSize {
			continue
		}
		var st []ingest.RankStatus
		if w.KvEventsEndpoint != "" {
			st = s.ingest.Status(w.WorkerId)
		}
		for r := first; r < w.DpSize; r++ {
			ent := &kvrouterv1.WorkerStatus{Worker: w, DpRank: r, Source: string(reg.Source)}
			for _, rs := range st {
				if rs.DPRank != r {
					continue
				}
				ent.Connected = rs.Connected
				ent.LastSeq = rs.LastSeq
				ent.EventsApplied = rs.EventsApplied
				ent.Gaps = rs.Gaps
				ent.Replays = rs.Replays
				ent.ReplayFailures = rs.ReplayFailures
				ent.EngineRestarts = rs.EngineRestarts
				ent.Reconnects = rs.Reconnects
				ent.DecodeErrors = rs.DecodeErrors
				ent.CachedBlocks = rs.CachedBlocks
				ent.Restore = rs.Restore
				ent.Inexact = rs.Inexact
				ent.InexactSinceSeq = rs.InexactSinceSeq
				ent.CapacityBlocks = rs.CapacityBlocks
				for _, p := range rs.Problems {
					ent.Problems = append(ent.Problems, &kvrouterv1.RankProblem{Reason: p.Reason, Count: p.Count, Detail: p.Detail})
				}
			}
			n := 1 + protowire.SizeBytes(proto.Size(ent)) // field 1: tag, length, entry
			if len(out.Workers) == size || (len(out.Workers) > 0 && pageBytes+n > listPageBytes) {
				last := out.Workers[len(out.Workers)-1]
				out.NextPageToken = pageToken(model, last.Worker.WorkerId, last.DpRank)
				return out, nil
			}
			pageBytes += n
			out.Workers = append(out.Workers, ent)
		}
	}
	return out, nil
}

// pageCursor is where a ListWorkers page token resumes: after this
// worker/rank.
type pageCursor struct {
	worker string
	rank   uint32
}

// pageToken is the opaque ListWorkers page token that resumes a listing of
// model after worker/rank: base64url of a version byte, the model
// (length-prefixed), the rank and the worker id.
func pageToken(model, worker string, rank uint32) string {
	b := []byte{1}
	b = protowire.AppendString(b, model)
	b = protowire.AppendVarint(b, uint64(rank))
	b = append(b, worker...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parsePageToken reads a page token made for model; an empty token is nil.
func parsePageToken(tok, model string) (*pageCursor, error) {
	if tok == "" {
		return nil, nil
	}
	bad := status.Error(codes.InvalidArgument, "page_token is not a next_page_token of ListWorkers")
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) == 0 || b[0] != 1 {
		return nil, bad
	}
	b = b[1:]
	m, n := protowire.ConsumeString(b)
	if n < 0 {
		return nil, bad
	}
	b = b[n:]
	rank, n := protowire.ConsumeVarint(b)
	if n < 0 || rank >= kv.MaxDPSize {
		return nil, bad
	}
	if m != model {
		return nil, status.Errorf(codes.InvalidArgument, "page_token continues a listing of model %q, not %q", m, model)
	}
	return &pageCursor{worker: string(b[n:]), rank: uint32(rank)}, nil
}
