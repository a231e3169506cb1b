// Package ui serves the planner's live web view at /ui/: hosts with their
// state and use, each host's NUMA nodes and CPUs with the pieces each
// instance holds (the picture `pinfold host show` draws), and instances
// with planned against measured CPU. The page reads the planner's own API
// (Connect JSON) and reloads its data when the server-sent events stream
// at /ui/events says the cluster changed. Its assets are embedded: no CDN,
// no build step.
package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"
)

//go:embed assets
var assets embed.FS

// Source is what the event stream watches: the cache's revision.
type Source interface {
	Rev() int64
	// WaitRev waits until the cache has reached rev, or ctx ends.
	WaitRev(ctx context.Context, rev int64) error
}

// MaxStreams bounds the event streams served at once (each holds a
// goroutine): past it a new one is refused with 503.
const MaxStreams = 64

// Handler serves the page at prefix (e.g. "/ui/") and its event stream at
// prefix+"events".
func Handler(prefix string, src Source) http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.Handle(prefix, http.StripPrefix(prefix, http.FileServerFS(sub)))
	slots := make(chan struct{}, MaxStreams)
	mux.HandleFunc(prefix+"events", func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			http.Error(w, fmt.Sprintf("pinfold: %d live views are open already; try again later", MaxStreams), http.StatusServiceUnavailable)
			return
		}
		stream(w, r, src)
	})
	return mux
}

// stream sends the cache's revision now and after each change (at most
// one event per coalesce), and a comment every keepalive while idle.
func stream(w http.ResponseWriter, r *http.Request, src Source) {
	const (
		coalesce  = 250 * time.Millisecond
		keepalive = 15 * time.Second
	)
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "pinfold: streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	rev := src.Rev()
	fmt.Fprintf(w, "event: change\ndata: %d\n\n", rev)
	fl.Flush()
	for {
		ctx, cancel := context.WithTimeout(r.Context(), keepalive)
		err := src.WaitRev(ctx, rev+1)
		cancel()
		if r.Context().Err() != nil {
			return
		}
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				// The cache's watch failed: say so, and do not spin.
				fmt.Fprintf(w, "event: error\ndata: %q\n\n", err.Error())
				fl.Flush()
				time.Sleep(time.Second)
				continue
			}
			fmt.Fprint(w, ": idle\n\n")
			fl.Flush()
			continue
		}
		select {
		case <-time.After(coalesce): // a burst of changes is one event
		case <-r.Context().Done():
			return
		}
		rev = src.Rev()
		fmt.Fprintf(w, "event: change\ndata: %d\n\n", rev)
		fl.Flush()
	}
}
