//go:build !linux

package gateway

import "net"

// clientWatch is Linux-only; elsewhere a client that leaves is noticed at
// the next failed write.
type clientWatch struct{}

func watchClient(net.Conn, func()) *clientWatch { return nil }

func (w *clientWatch) stop() {}
