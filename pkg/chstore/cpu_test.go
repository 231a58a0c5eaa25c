package chstore

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuClock reads the CPU time used by this process and by the
// clickhouse-server process whose command line names dir (the chtest
// server's directory), so a benchmark can show which side is busy. On
// systems without /proc the server's time reads as 0.
type cpuClock struct {
	serverPID int
	tick      float64 // clock ticks per second of /proc/<pid>/stat
}

func newCPUClock(dir string) cpuClock {
	c := cpuClock{tick: 100} // USER_HZ on Linux
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte("clickhouse")) && bytes.Contains(cmd, []byte(dir)) {
			c.serverPID = pid
			break
		}
	}
	return c
}

// read returns the CPU time (user + system) of this process and of the
// server so far.
func (c cpuClock) read() (self, server time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if c.serverPID == 0 {
		return self, 0
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.serverPID), "stat"))
	if err != nil {
		return self, 0
	}
	// Fields after the command (which may hold spaces) start after ')':
	// utime and stime are fields 14 and 15, i.e. 11 and 12 after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return self, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return self, 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return self, time.Duration((ut + st) / c.tick * float64(time.Second))
}
