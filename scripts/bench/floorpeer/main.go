// Command floorpeer is the other process of the runtime floors in `make
// bench-clients` (scripts/bench/floor_python.py, floor_typescript.mjs): a
// Go process, as the engine is, that sends or takes SIZE bytes through one
// channel, or echoes lines, so a language's own cost of moving bytes to and
// from another process is measured with no engine and no package code.
//
//	floorpeer send pipe|fifo|unix|file PATH SIZE   (PATH unused for pipe)
//	floorpeer recv pipe|fifo|unix|file PATH SIZE
//	floorpeer echo
//
// send: prepares (the bytes in memory, the FIFO made, the socket listening),
// writes "ready" on stderr, waits for one byte on stdin, then sends the
// bytes (to stdout for pipe; a file is written whole, then "done" on
// stderr). recv: prepares, writes "ready" on stderr, takes the bytes (from
// stdin for pipe; a file once a line on stdin says it is written) and
// writes "got N" on stderr. echo: each stdin line back on stdout.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "floorpeer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 1 && args[0] == "echo" {
		return echo()
	}
	if len(args) != 4 {
		return fmt.Errorf("usage: floorpeer send|recv pipe|fifo|unix|file PATH SIZE, or floorpeer echo")
	}
	size, err := strconv.Atoi(args[3])
	if err != nil || size <= 0 {
		return fmt.Errorf("SIZE %q is not a positive count of bytes", args[3])
	}
	switch args[0] {
	case "send":
		return send(args[1], args[2], size)
	case "recv":
		return recv(args[1], args[2], size)
	}
	return fmt.Errorf("unknown mode %q", args[0])
}

func echo() error {
	r := bufio.NewReaderSize(os.Stdin, 1<<16)
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return werr
			}
			if werr := w.Flush(); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// open makes the channel's far end: a FIFO (made here, opened once the
// language opens its end), an accepted Unix socket connection, or stdin or
// stdout for pipe. ready is written before anything that waits for the
// language.
func open(channel, path string, forWrite bool) (io.ReadWriteCloser, error) {
	switch channel {
	case "pipe":
		ready()
		if forWrite {
			widen(os.Stdout)
			return os.Stdout, nil
		}
		widen(os.Stdin)
		return os.Stdin, nil
	case "fifo":
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			return nil, err
		}
		ready()
		flag := os.O_RDONLY
		if forWrite {
			flag = os.O_WRONLY
		}
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			return nil, err
		}
		widen(f)
		return f, nil
	case "unix":
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ready()
		return l.Accept()
	}
	return nil, fmt.Errorf("unknown channel %q", channel)
}

// widen gives a pipe or FIFO a 1 MiB buffer (F_SETPIPE_SZ, as the engine
// does for a FIFO sink), so one read takes up to 1 MiB instead of the
// default 64 KiB; past pipe-max-size it stays as it was.
func widen(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, 1<<20)
}

func ready() { fmt.Fprintln(os.Stderr, "ready") }

func send(channel, path string, size int) error {
	data := make([]byte, size)
	for i := range data {
		data[i] = "0123456789abcdef"[i%16]
	}
	if channel == "file" {
		ready()
		if err := waitByte(); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "done")
		return nil
	}
	// The language's go comes on stdin: for pipe it is read before stdout
	// is written; for the others, before the channel is opened or once it is.
	if channel == "pipe" {
		ready()
		if err := waitByte(); err != nil {
			return err
		}
		_, err := os.Stdout.Write(data)
		return err
	}
	c, err := open(channel, path, true)
	if err != nil {
		return err
	}
	if err := waitByte(); err != nil {
		return err
	}
	if _, err := c.Write(data); err != nil {
		return err
	}
	return c.Close()
}

func waitByte() error {
	var b [1]byte
	_, err := io.ReadFull(os.Stdin, b[:])
	return err
}

func recv(channel, path string, size int) error {
	buf := make([]byte, 1<<20)
	var src io.Reader
	if channel == "file" {
		ready()
		if _, err := bufio.NewReader(os.Stdin).ReadBytes('\n'); err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		src = f
	} else {
		c, err := open(channel, path, false)
		if err != nil {
			return err
		}
		defer c.Close()
		src = c
	}
	n := 0
	for n < size {
		m, err := src.Read(buf)
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "got %d\n", n)
	return nil
}
