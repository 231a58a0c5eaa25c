package gateway

import (
	"net"
	"sync"
	"syscall"
)

// clientWatch notices a client that closes its connection while a stream is
// relayed, without waiting for the next write to fail: the next write may
// be minutes away when the provider is slow to produce tokens. When the
// client's socket reports that its peer closed, the watch peeks: end of
// file (or a reset) means the client is gone, and the relay's clientGone
// runs at once (it closes the upstream connection). Any bytes (a pipelined
// request) end the watch without consuming them.
//
// The sockets are watched by one goroutine per process, waiting in
// epoll_wait on an epoll instance of its own: each held stream registers
// its client socket there for EPOLLRDHUP, one shot, and removes it when the
// stream ends. A stream costs two epoll_ctl calls, and no goroutine, stack,
// timer or read deadline of its own.
type clientWatch struct {
	fd  int32
	gen uint32 // tells this registration from an earlier one of the same fd
	on  bool   // registered
	to  goneNotifier
}

// goneNotifier is told when its client has left (the relay).
type goneNotifier interface{ clientGone() }

// watchShards spread the registrations over locks by file descriptor, so
// that streams starting and ending at once do not share one lock.
const watchShards = 64

type watchShard struct {
	mu  sync.Mutex
	gen uint32
	m   map[int32]*clientWatch
}

type watcher struct {
	epfd   int
	shards [watchShards]watchShard
}

// clientWatcher is the process's watcher, started by the first stream; nil
// when the system refuses an epoll instance, and then a client that leaves
// is noticed at the next failed write, as on other systems.
var clientWatcher = sync.OnceValue(func() *watcher {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &watcher{epfd: epfd}
	for i := range w.shards {
		w.shards[i].m = make(map[int32]*clientWatch)
	}
	go w.run()
	return w
})

const watchEvents = syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// start watches c for to, when c exposes its socket (it does not when TLS
// is terminated in this process; then nothing is watched).
func (cw *clientWatch) start(c net.Conn, to goneNotifier) {
	w := clientWatcher()
	sc, ok := c.(syscall.Conn)
	if w == nil || !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		s := &w.shards[fd%watchShards]
		s.mu.Lock()
		defer s.mu.Unlock()
		s.gen++
		ev := syscall.EpollEvent{Events: watchEvents, Fd: int32(fd), Pad: int32(s.gen)}
		if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) != nil {
			return
		}
		*cw = clientWatch{fd: int32(fd), gen: s.gen, on: true, to: to}
		s.m[cw.fd] = cw
	})
}

// stop ends the watch. It runs while the client connection is still open
// (the relay's CloseWithError does), so the descriptor has not been reused.
// Once stop returns, clientGone is not running and will not run for this
// watch.
func (cw *clientWatch) stop() {
	if !cw.on {
		return
	}
	w := clientWatcher()
	s := &w.shards[uint32(cw.fd)%watchShards]
	s.mu.Lock()
	if s.m[cw.fd] == cw {
		w.remove(s, cw.fd)
	}
	s.mu.Unlock()
	*cw = clientWatch{}
}

// remove ends a registration, with its shard locked: a descriptor is in the
// epoll instance exactly while it is in the shard's map, so that the same
// connection's next stream can register it again.
func (w *watcher) remove(s *watchShard, fd int32) {
	delete(s.m, fd)
	_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
}

func (w *watcher) run() {
	var events [128]syscall.EpollEvent
	for {
		n, err := syscall.EpollWait(w.epfd, events[:], -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return // the epoll instance is never closed; nothing else fails
		}
		for _, ev := range events[:n] {
			w.fire(ev.Fd, uint32(ev.Pad))
		}
	}
}

// fire handles one event. An event of an earlier registration of the same
// descriptor (the stream ended meanwhile) finds another generation, or no
// watch, and is dropped. The shard's lock is held throughout, so stop
// cannot return, and the descriptor cannot be closed, while it peeks.
func (w *watcher) fire(fd int32, gen uint32) {
	s := &w.shards[uint32(fd)%watchShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	cw := s.m[fd]
	if cw == nil || cw.gen != gen {
		return
	}
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR: // nothing after all: wait again
		ev := syscall.EpollEvent{Events: watchEvents, Fd: fd, Pad: int32(gen)}
		if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev) != nil {
			w.remove(s, fd)
		}
	case n == 0 || err != nil: // end of file or reset: the client is gone
		w.remove(s, fd)
		cw.to.clientGone()
	default: // bytes of a pipelined request: left for the server
		w.remove(s, fd)
	}
}
