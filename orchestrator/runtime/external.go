package runtime

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// External is the runtime of arms that already run (runtime kind external): each
// launch's BaseURL is the engine, as bench_serving's --base-url. It launches nothing
// and stops nothing: Stop only ends arbiter's use of the engine.
type External struct{}

// Start returns the engine at l.BaseURL; whether it answers is the readiness check's
// to find out.
func (External) Start(ctx context.Context, l Launch) (Instance, error) {
	if l.BaseURL == "" {
		return nil, errors.New("external runtime: the arm has no base_url")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &externalInstance{endpoint: strings.TrimRight(l.BaseURL, "/"), done: make(chan struct{})}, nil
}

type externalInstance struct {
	endpoint string
	done     chan struct{}
	once     sync.Once
}

func (i *externalInstance) Endpoint() string      { return i.endpoint }
func (i *externalInstance) Done() <-chan struct{} { return i.done }

// InstanceID is "external " and the base URL.
func (i *externalInstance) InstanceID() string { return "external " + i.endpoint }

// Exit is a stop: an external engine is never seen to end.
func (i *externalInstance) Exit() Exit {
	return Exit{Stopped: true, LogTail: "[arbiter: an external engine; its log is where it runs]"}
}

// Stop ends arbiter's use of the engine, which keeps running.
func (i *externalInstance) Stop(context.Context) error {
	i.once.Do(func() { close(i.done) })
	return nil
}
