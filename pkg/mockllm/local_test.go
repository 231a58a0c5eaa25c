package mockllm

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestLocal(t *testing.T) {
	var l Local
	if _, err := l.URL(); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("URL before Open: %v", err)
	}
	if l.Addr() != "" {
		t.Fatal("Addr before Open")
	}
	u, err := l.Open()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := l.Open(); again != u {
		t.Fatalf("second Open = %s, want %s", again, u)
	}
	if got, err := l.URL(); err != nil || got != u {
		t.Fatalf("URL = %s, %v", got, err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Serve(nil) }()
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		if resp, err = http.Get(u + "/models"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/models: %d", resp.StatusCode)
	}
	if err := l.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if err := l.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestLocalNotOpened(t *testing.T) {
	var l Local
	if err := l.Serve(nil); err != nil {
		t.Fatalf("Serve without Open: %v", err)
	}
	if err := l.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
