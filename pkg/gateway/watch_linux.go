package gateway

import (
	"net"
	"syscall"
	"time"
)

// clientWatch notices a client that closes its connection while a stream is
// relayed, without waiting for the next write to fail: the next write may
// be minutes away when the provider is slow to produce tokens. It waits for
// the client socket to become readable and peeks: end of file means the
// client is gone, and onGone runs at once (it closes the upstream
// connection). Any bytes (a pipelined request) end the watch without
// consuming them.
type clientWatch struct {
	conn net.Conn
	done chan struct{}
}

// watchClient starts a watch on c, or returns nil when c does not expose
// its socket (TLS is terminated by a proxy in front in that case).
func watchClient(c net.Conn, onGone func()) *clientWatch {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &clientWatch{conn: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		gone := false
		var buf [1]byte
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EAGAIN || err == syscall.EINTR {
				return false // not readable yet: wait in the poller
			}
			gone = n == 0 || err != nil
			return true
		})
		if err == nil && gone {
			onGone()
		}
	}()
	return w
}

// stop ends the watch and waits for it, then clears the read deadline it
// used so the server's own deadlines apply to the next request.
func (w *clientWatch) stop() {
	if w == nil {
		return
	}
	_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
}
