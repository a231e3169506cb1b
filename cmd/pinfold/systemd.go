package main

import (
	"context"
	"log/slog"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// notifySystemd tells systemd (Type=notify units; NOTIFY_SOCKET set) that
// the daemon is ready, then pings its watchdog at half WatchdogSec while
// alive() holds, until ctx ends; the returned func says STOPPING. Without
// systemd every call is a no-op.
func notifySystemd(ctx context.Context, log *slog.Logger, alive func() bool) (stopping func()) {
	if ok, err := sd.SdNotify(false, sd.SdNotifyReady); err != nil {
		log.Warn("systemd: READY not sent", "err", err)
	} else if ok {
		log.Info("systemd: READY sent")
	}
	if every, err := sd.SdWatchdogEnabled(false); err == nil && every > 0 {
		go func() {
			t := time.NewTicker(every / 2)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if alive() {
						_, _ = sd.SdNotify(false, sd.SdNotifyWatchdog)
					}
				}
			}
		}()
	}
	return func() { _, _ = sd.SdNotify(false, sd.SdNotifyStopping) }
}
