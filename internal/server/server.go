package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// Config configures a Server.
type Config struct {
	// Router scores and routes prompts. Required.
	Router *scoring.Router
	// Ingest follows workers' KV event streams. Required.
	Ingest *ingest.Manager
	// Logger receives registry changes; nil discards.
	Logger *slog.Logger
	// Index, when set, has its size and refusals reported as
	// kvrouter_index_* metrics.
	Index *radix.Index
	// Registerer receives the RPC and index metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Server implements the kvrouter.v1 Router and Registry services.
type Server struct {
	kvrouterv1.UnimplementedRouterServer
	kvrouterv1.UnimplementedRegistryServer

	router  *scoring.Router
	ingest  *ingest.Manager
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex // serializes registry changes
	workers map[string]*kvrouterv1.Worker
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Router == nil || cfg.Ingest == nil {
		return nil, errors.New("server: Config.Router and Config.Ingest are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		router:  cfg.Router,
		ingest:  cfg.Ingest,
		log:     log,
		workers: make(map[string]*kvrouterv1.Worker),
	}
	m, err := newMetrics(cfg.Registerer, s, cfg.Index)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	return s, nil
}

// RegisterServices registers the Router and Registry services on g.
func (s *Server) RegisterServices(g *grpc.Server) {
	kvrouterv1.RegisterRouterServer(g, s)
	kvrouterv1.RegisterRegistryServer(g, s)
}

// GRPCOptions returns the options a grpc.Server needs to serve s: its
// interceptor and its codec (proto, with a faster decoder for prompts).
func (s *Server) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor()),
		grpc.ForceServerCodecV2(newCodec()),
	}
}

// UnaryInterceptor records every RPC's latency and error code in the metrics.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		s.metrics.observe(info.FullMethod, time.Since(start), status.Code(err))
		return resp, err
	}
}

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
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

func prompt(p *kvrouterv1.Prompt) (*scoring.Prompt, error) {
	if p == nil {
		return nil, status.Error(codes.InvalidArgument, "prompt is missing")
	}
	sp := &scoring.Prompt{
		Model:       p.GetModel(),
		Tokens:      p.GetTokenIds(),
		BlockHashes: p.GetBlockHashes(),
		LoRAName:    p.GetLoraName(),
		CacheSalt:   p.GetCacheSalt(),
	}
	for _, it := range p.GetMmItems() {
		sp.MM = append(sp.MM, scoring.MMItem{Hash: it.GetHash(), Offset: it.GetOffset(), Length: it.GetLength()})
	}
	return sp, nil
}

// Score reports every worker/rank's prefix overlap with the prompt.
func (s *Server) Score(_ context.Context, req *kvrouterv1.ScoreRequest) (*kvrouterv1.ScoreResponse, error) {
	p, err := prompt(req.GetPrompt())
	if err != nil {
		return nil, err
	}
	res, err := s.router.Score(p)
	if err != nil {
		return nil, grpcError(err)
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

// Route chooses the worker for the prompt.
func (s *Server) Route(_ context.Context, req *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error) {
	p, err := prompt(req.GetPrompt())
	if err != nil {
		return nil, err
	}
	d, err := s.router.Route(p, req.GetRequestId(), req.GetTemperature(), int(req.GetMaxCandidates()))
	if err != nil {
		return nil, grpcError(err)
	}
	s.metrics.decision(d)
	out := &kvrouterv1.RouteResponse{
		WorkerId:      d.WorkerID,
		DpRank:        d.DPRank,
		Endpoint:      d.Endpoint,
		MatchedBlocks: d.Matched,
		PromptBlocks:  d.PromptBlocks,
		Cost:          d.Cost,
		Candidates:    make([]*kvrouterv1.Candidate, len(d.Candidates)),
	}
	cands := make([]kvrouterv1.Candidate, len(d.Candidates)) // one allocation for all
	for i, c := range d.Candidates {
		cands[i] = kvrouterv1.Candidate{
			WorkerId: c.WorkerID, DpRank: c.DPRank, MatchedBlocks: c.Matched,
			PrefillBlocks: c.PrefillBlocks, DecodeBlocks: c.DecodeBlocks, Cost: c.Cost,
		}
		out.Candidates[i] = &cands[i]
	}
	return out, nil
}

// MarkPrefillDone moves a request's load from prefill to decode.
func (s *Server) MarkPrefillDone(_ context.Context, req *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	if req.GetRequestId() == "" {
		return nil, status.Error(codes.InvalidArgument, "request_id is empty")
	}
	return &kvrouterv1.Ack{}, grpcError(s.router.MarkPrefillDone(req.GetRequestId()))
}

// MarkFinished ends a request's load.
func (s *Server) MarkFinished(_ context.Context, req *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error) {
	if req.GetRequestId() == "" {
		return nil, status.Error(codes.InvalidArgument, "request_id is empty")
	}
	return &kvrouterv1.Ack{}, grpcError(s.router.MarkFinished(req.GetRequestId()))
}

// RegisterWorker validates and adds a worker, and starts following its events.
func (s *Server) RegisterWorker(_ context.Context, req *kvrouterv1.RegisterWorkerRequest) (*kvrouterv1.RegisterWorkerResponse, error) {
	if err := s.Register(req.GetWorker()); err != nil {
		return nil, err
	}
	return &kvrouterv1.RegisterWorkerResponse{}, nil
}

// Register validates and adds a worker (also used for the config file's static
// workers). Errors are gRPC statuses naming the offending field.
func (s *Server) Register(w *kvrouterv1.Worker) error {
	if err := validate(w); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.workers[w.WorkerId]; ok {
		return status.Errorf(codes.InvalidArgument, "worker.worker_id %q is already registered", w.WorkerId)
	}
	dp := int(max(w.DpSize, 1))
	// Events first: a worker whose subscription cannot start is never a
	// candidate, not even for the Routes that would run before a rollback.
	if w.KvEventsEndpoint != "" {
		err := s.ingest.Add(ingest.Worker{
			ID: w.WorkerId, Model: w.Model, KVEndpoint: w.KvEventsEndpoint,
			ReplayEndpoint: w.ReplayEndpoint, Topic: w.Topic, DPSize: dp,
		})
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "worker.kv_events_endpoint: %v", err)
		}
	}
	if err := s.router.AddWorker(scoring.Worker{
		ID: w.WorkerId, Model: w.Model, Endpoint: w.Endpoint, DPSize: dp,
		Approximate: w.KvEventsEndpoint == "",
	}); err != nil {
		if w.KvEventsEndpoint != "" {
			if rerr := s.ingest.Remove(w.WorkerId); rerr != nil {
				s.log.Warn("rolling back a registration", "worker", w.WorkerId, "err", rerr)
			}
		}
		return grpcError(err)
	}
	stored := cloneWorker(w)
	stored.DpSize = uint32(dp)
	s.workers[w.WorkerId] = stored
	s.metrics.workers.Set(float64(len(s.workers)))
	s.log.Info("worker registered", "worker", w.WorkerId, "model", w.Model, "dp_size", dp,
		"kv_events_endpoint", w.KvEventsEndpoint, "replay_endpoint", w.ReplayEndpoint)
	return nil
}

func cloneWorker(w *kvrouterv1.Worker) *kvrouterv1.Worker {
	return &kvrouterv1.Worker{
		WorkerId: w.WorkerId, Model: w.Model, Endpoint: w.Endpoint,
		KvEventsEndpoint: w.KvEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
		DpSize: w.DpSize, BlockSize: w.BlockSize, Topic: w.Topic,
	}
}

// validate checks a registration's fields; each error names the field.
func validate(w *kvrouterv1.Worker) error {
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, format, args...)
	}
	switch {
	case w == nil:
		return bad("worker is missing")
	case strings.TrimSpace(w.WorkerId) == "":
		return bad("worker.worker_id is empty")
	case strings.TrimSpace(w.Model) == "":
		return bad("worker.model is empty")
	case w.DpSize > kv.MaxDPSize:
		return bad("worker.dp_size %d is over the limit of %d", w.DpSize, kv.MaxDPSize)
	}
	if w.Endpoint != "" {
		if err := validateServingEndpoint(w.Endpoint); err != nil {
			return bad("worker.endpoint %q: %v", w.Endpoint, err)
		}
	}
	if w.ReplayEndpoint != "" && w.KvEventsEndpoint == "" {
		return bad("worker.replay_endpoint is set without worker.kv_events_endpoint")
	}
	last := int(max(w.DpSize, 1)) - 1
	if w.KvEventsEndpoint != "" {
		if err := checkRankEndpoints(w.KvEventsEndpoint, last, false); err != nil {
			return bad("worker.kv_events_endpoint %q: %v", w.KvEventsEndpoint, err)
		}
	}
	if w.ReplayEndpoint != "" {
		if err := checkRankEndpoints(w.ReplayEndpoint, last, true); err != nil {
			return bad("worker.replay_endpoint %q: %v", w.ReplayEndpoint, err)
		}
	}
	return nil
}

// checkRankEndpoints checks that ranks 0..last of ep are endpoints ingest can
// use, so that an error names the right field before ingest starts. A replay
// endpoint is always dialled (the engine binds it).
func checkRankEndpoints(ep string, last int, replay bool) error {
	for _, r := range []int{0, last} {
		s, err := ingest.RankEndpoint(ep, r)
		if err != nil {
			return err
		}
		if replay {
			if strings.HasPrefix(s, "@") {
				return errors.New("the engine binds its replay socket; the router cannot")
			}
			s = ">" + strings.TrimPrefix(s, ">")
		}
		if _, err := ingest.ParseEndpoint(s); err != nil {
			return err
		}
	}
	return nil
}

// validateServingEndpoint accepts host:port or a URL with a host.
func validateServingEndpoint(ep string) error {
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		if u.Host == "" {
			return errors.New("URL has no host")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fmt.Errorf("want host:port or a URL: %w", err)
	}
	if host == "" || port == "" {
		return errors.New("want host:port or a URL")
	}
	return nil
}

// UnregisterWorker stops following a worker and drops its blocks and load.
func (s *Server) UnregisterWorker(_ context.Context, req *kvrouterv1.UnregisterWorkerRequest) (*kvrouterv1.UnregisterWorkerResponse, error) {
	id := req.GetWorkerId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "worker_id is empty")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "worker_id %q is not registered", id)
	}
	if w.KvEventsEndpoint != "" {
		// Remove forgets the worker even when stopping its subscriptions
		// fails, so the router forgets it too: failing here would leave a
		// worker that no later UnregisterWorker could remove.
		if err := s.ingest.Remove(id); err != nil {
			s.log.Warn("stop following worker", "worker", id, "err", err)
		}
	}
	s.router.RemoveWorker(id)
	delete(s.workers, id)
	s.metrics.workers.Set(float64(len(s.workers)))
	s.metrics.forgetWorker(id)
	s.log.Info("worker unregistered", "worker", id)
	return &kvrouterv1.UnregisterWorkerResponse{}, nil
}

// ListWorkers reports every worker/rank of a model (empty: all), by worker id.
func (s *Server) ListWorkers(_ context.Context, req *kvrouterv1.ListWorkersRequest) (*kvrouterv1.ListWorkersResponse, error) {
	s.mu.Lock()
	ws := make([]*kvrouterv1.Worker, 0, len(s.workers))
	for _, w := range s.workers {
		if req.GetModel() == "" || w.Model == req.GetModel() {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	sort.Slice(ws, func(i, j int) bool { return ws[i].WorkerId < ws[j].WorkerId })
	out := &kvrouterv1.ListWorkersResponse{}
	for _, w := range ws {
		var st []ingest.RankStatus
		if w.KvEventsEndpoint != "" {
			st = s.ingest.Status(w.WorkerId)
		}
		for r := uint32(0); r < w.DpSize; r++ {
			ws := &kvrouterv1.WorkerStatus{Worker: w, DpRank: r}
			for _, rs := range st {
				if rs.DPRank != r {
					continue
				}
				ws.Connected = rs.Connected
				ws.LastSeq = rs.LastSeq
				ws.EventsApplied = rs.EventsApplied
				ws.Gaps = rs.Gaps
				ws.Replays = rs.Replays
				ws.ReplayFailures = rs.ReplayFailures
				ws.EngineRestarts = rs.EngineRestarts
				ws.Reconnects = rs.Reconnects
				ws.DecodeErrors = rs.DecodeErrors
				ws.CachedBlocks = rs.CachedBlocks
			}
			out.Workers = append(out.Workers, ws)
		}
	}
	return out, nil
}
