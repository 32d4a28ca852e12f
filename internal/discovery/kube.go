package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// KubeConfig configures a Kubernetes source.
type KubeConfig struct {
	// Client lists and watches pods; required.
	Client kubernetes.Interface
	// Dynamic reads the InferencePool; required with Pool.
	Dynamic dynamic.Interface
	// Namespace the pods (and the pool) are in; required.
	Namespace string
	// Selector selects the pods (a label selector); ignored with Pool.
	Selector string
	// Pool names an InferencePool whose selector and target ports are
	// used instead of Selector and Defaults.Port.
	Pool string
	// Defaults describe a pod's engine where its annotations do not.
	Defaults Defaults
	// Resync re-lists the informers' caches (0: never).
	Resync time.Duration
	// Logger receives skipped pods; nil discards.
	Logger *slog.Logger
	// Metrics count the pods found and skipped; nil counts nothing.
	Metrics *Metrics
}

// Kube is a Source of the ready pods a selector or an InferencePool
// selects, watched with client-go informers.
type Kube struct {
	cfg      KubeConfig
	log      *slog.Logger
	selector labels.Selector
	kick     chan struct{}
}

// NewKube returns a Kubernetes source for cfg.
func NewKube(cfg KubeConfig) (*Kube, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("discovery: KubeConfig.Client is required")
	case cfg.Namespace == "":
		return nil, errors.New("discovery: KubeConfig.Namespace is required")
	case cfg.Pool != "" && cfg.Dynamic == nil:
		return nil, errors.New("discovery: KubeConfig.Dynamic is required with an InferencePool")
	case cfg.Pool == "" && cfg.Selector == "":
		return nil, errors.New("discovery: a pod selector or an InferencePool is required")
	}
	sel := labels.Everything()
	if cfg.Pool == "" {
		var err error
		if sel, err = labels.Parse(cfg.Selector); err != nil {
			return nil, fmt.Errorf("discovery: selector %q: %w", cfg.Selector, err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Kube{cfg: cfg, log: log, selector: sel, kick: make(chan struct{}, 1)}, nil
}

// Name is "kubernetes".
func (k *Kube) Name() string { return "kubernetes" }

// Run watches until ctx is done, reporting the workers after the caches
// sync and after every change of a pod or the pool.
func (k *Kube) Run(ctx context.Context, report func([]*kvrouterv1.Worker)) error {
	f := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, k.cfg.Resync, informers.WithNamespace(k.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k.selector.String() }))
	pods := f.Core().V1().Pods()
	if _, err := pods.Informer().AddEventHandler(k.handler()); err != nil {
		return err
	}
	synced := []cache.InformerSynced{pods.Informer().HasSynced}
	var pools cache.GenericLister
	if k.cfg.Pool != "" {
		df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(k.cfg.Dynamic, k.cfg.Resync, k.cfg.Namespace, nil)
		pi := df.ForResource(InferencePoolGVR)
		if _, err := pi.Informer().AddEventHandler(k.handler()); err != nil {
			return err
		}
		pools = pi.Lister()
		synced = append(synced, pi.Informer().HasSynced)
		df.Start(ctx.Done())
		defer df.Shutdown()
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	for {
		ws, skipped, err := k.workers(pods.Lister().Pods(k.cfg.Namespace), pools)
		if err != nil {
			k.log.Warn("discovery: not reporting", "source", k.Name(), "err", err)
			k.cfg.Metrics.failed(k.Name())
		} else {
			k.cfg.Metrics.looked(k.Name(), len(ws), skipped)
			report(ws)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-k.kick:
		}
	}
}

func (k *Kube) handler() cache.ResourceEventHandler {
	wake := func() {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake() },
		UpdateFunc: func(any, any) { wake() },
		DeleteFunc: func(any) { wake() },
	}
}

// workers lists the ready pods as workers. A pod whose annotations do not
// parse is logged, counted in skipped, and left out; a missing or unusable
// pool is an error (the last report stands rather than every worker
// leaving over a typo).
func (k *Kube) workers(pods podLister, pools cache.GenericLister) (_ []*kvrouterv1.Worker, skipped int, _ error) {
	var pool *Pool
	if pools != nil {
		obj, err := pools.ByNamespace(k.cfg.Namespace).Get(k.cfg.Pool)
		if err != nil {
			return nil, 0, fmt.Errorf("InferencePool %s/%s: %w", k.cfg.Namespace, k.cfg.Pool, err)
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, 0, fmt.Errorf("InferencePool %s/%s: unexpected %T", k.cfg.Namespace, k.cfg.Pool, obj)
		}
		if pool, err = ParsePool(u); err != nil {
			return nil, 0, err
		}
	}
	list, err := pods.List(k.selector)
	if err != nil {
		return nil, 0, err
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	var out []*kvrouterv1.Worker
	for _, p := range list {
		if !PodReady(p) || (pool != nil && !pool.Selects(p.Labels)) {
			continue
		}
		w, err := PodWorker(p, k.cfg.Defaults, pool)
		if err != nil {
			k.log.Warn("discovery: pod skipped", "pod", p.Name, "err", err)
			skipped++
			continue
		}
		out = append(out, w)
	}
	return out, skipped, nil
}

type podLister interface {
	List(labels.Selector) ([]*corev1.Pod, error)
}
