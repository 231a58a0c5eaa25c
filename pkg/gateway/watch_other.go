//go:build !linux

package gateway

import "net"

// clientWatch is Linux-only; elsewhere a client that leaves is noticed at
// the next failed write.
type clientWatch struct{}

// goneNotifier is told when its client has left (the relay).
type goneNotifier interface{ clientGone() }

func (cw *clientWatch) start(net.Conn, goneNotifier) {}

func (cw *clientWatch) stop() {}
