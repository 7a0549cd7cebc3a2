// Package arrowpool is an Arrow memory allocator that reuses the buffers Arrow frees.
//
// Arrow's Go allocator leaves a freed buffer to the garbage collector and allocates every new one
// from fresh, zeroed memory: a reader that decodes hundreds of megabytes a second pays for the
// page faults, the zeroing and the collections that allocation rate drives. A Pool keeps freed
// buffers in size classes and hands them out again, zeroed, as an allocator must.
package arrowpool

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Buffers of fewer than 1<<minShift bytes or more than 1<<maxShift come from Arrow's Go allocator
// and are left to the garbage collector.
const (
	minShift   = 12 // 4 KiB
	maxShift   = 28 // 256 MiB
	numClasses = (maxShift-minShift)*4 + 1
)

// alignment is what Arrow requires of a buffer's start.
const alignment = 64

// Pool is a memory.Allocator that reuses freed buffers. Like every Arrow allocator, it returns
// zeroed memory, and a slice whose capacity is its length: Arrow's compute kernels size their
// output buffers by a slice's capacity and write them by its length, so a slice with spare
// capacity makes a string Take or Filter write past its end. A buffer must not be used after it is
// freed (Arrow frees it when its last reference is released): the next allocation of its size
// class may return it. Size classes are four to a power of two (a buffer is at most 25 % larger
// than asked for). Its free buffers are held in sync.Pools, which the garbage collector empties
// when they stay unused. Safe for concurrent use.
//
// REQUIRES: Reallocate and Free are given only slices this Pool returned (Arrow's Allocator
// contract): the capacity of a pooled buffer is found again from the slice's length.
type Pool struct {
	fallback memory.GoAllocator
	classes  [numClasses]sync.Pool
}

var _ memory.Allocator = (*Pool)(nil)

// New returns an empty Pool.
func New() *Pool { return &Pool{} }

// class returns the size class of a buffer of n bytes and its capacity: the smallest of 4 KiB and
// 2^e + k*2^(e-2) (k = 1..4) that holds n. ok is false above 256 MiB.
func class(n int) (c, size int, ok bool) {
	if n <= 1<<minShift {
		return 0, 1 << minShift, true
	}
	if n > 1<<maxShift {
		return 0, 0, false
	}
	e := bits.Len(uint(n-1)) - 1 // 2^e < n <= 2^(e+1)
	step := 1 << (e - 2)
	k := (n - 1<<e + step - 1) / step
	return (e-minShift)*4 + k, 1<<e + k*step, true
}

// pooled reports whether a buffer of n bytes is one of the classes' (and not the fallback's).
func pooled(n int) bool { return n >= 1<<minShift && n <= 1<<maxShift }

// whole returns the buffer of its size class that b, a slice this Pool returned, starts: every
// buffer of a pooled length n that the Pool hands out starts an allocation of at least class(n)'s
// capacity.
func whole(b []byte) []byte {
	_, capacity, _ := class(cap(b))
	return unsafe.Slice(unsafe.SliceData(b), capacity)
}

// Allocate returns size zeroed bytes.
func (p *Pool) Allocate(size int) []byte {
	b, reused := p.get(size)
	if reused {
		clear(b)
	}
	return b
}

// AllocateDirty returns size bytes that may hold a freed buffer's contents: for a buffer the
// caller overwrites whole. Give it back with Free.
func (p *Pool) AllocateDirty(size int) []byte {
	b, _ := p.get(size)
	return b
}

// get returns size bytes with no spare capacity, and whether they were freed before (and are not
// zeroed).
func (p *Pool) get(size int) ([]byte, bool) {
	if !pooled(size) {
		return p.fallback.Allocate(size), false
	}
	c, capacity, _ := class(size)
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:size:size], true
	}
	// Go places an object of a size class that is a multiple of 64 bytes at a multiple of its
	// size from a page boundary, and a large one at a page: Arrow's 64-byte alignment holds. An
	// allocation that lands elsewhere is padded, so that every pooled buffer starts an allocation
	// of its class's capacity (whole).
	buf := make([]byte, capacity)
	if shift := misalignment(buf); shift != 0 {
		buf = make([]byte, capacity+alignment)
		buf = buf[misalignment(buf):][:capacity:capacity]
	}
	return buf[:size:size], false
}

// misalignment returns how many bytes past b's start the next 64-byte boundary is.
func misalignment(b []byte) int {
	return int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) % alignment)
}

// Reallocate resizes b, a slice this Pool returned, to size bytes, keeping its contents; bytes
// beyond its old length are zeroed.
func (p *Pool) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size:size]
	}
	if pooled(cap(b)) && pooled(size) {
		if w := whole(b); size <= len(w) { // the class's spare capacity
			clear(w[len(b):size])
			return w[:size:size]
		}
	}
	nb, reused := p.get(size)
	n := copy(nb, b)
	if reused {
		clear(nb[n:]) // what the copy did not overwrite
	}
	p.Free(b)
	return nb
}

// Free returns b, a slice this Pool returned, to its size class; a buffer of the fallback's is
// left to the collector.
func (p *Pool) Free(b []byte) {
	if !pooled(cap(b)) || misalignment(b) != 0 {
		return
	}
	w := whole(b)
	c, _, _ := class(len(w))
	p.classes[c].Put(&w)
}
