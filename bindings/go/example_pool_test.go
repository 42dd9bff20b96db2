// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// A worker pool: any number of goroutines Recv from one channel. Idle
// workers wait in the channel's queue and each job wakes the one worker it
// goes to, not the whole pool; Close lets each worker finish what is
// queued and then see end of stream.
func ExampleChan_Recv_workerPool() {
	jobs, err := eventq.NewChan(eventq.WithCapacity(64))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer jobs.Release()

	var (
		mu      sync.Mutex
		results []string
		wg      sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				job, err := jobs.Recv(context.Background())
				if errors.Is(err, eventq.ErrClosed) {
					return // closed and drained: the pool is done
				}
				if err != nil {
					fmt.Println(err)
					return
				}
				mu.Lock()
				results = append(results, "done "+string(job))
				mu.Unlock()
			}
		}()
	}

	for _, job := range []string{"a", "b", "c", "d"} {
		if err := jobs.Send(context.Background(), []byte(job)); err != nil {
			fmt.Println(err)
		}
	}
	jobs.Close()
	wg.Wait()

	sort.Strings(results)
	fmt.Println(results)
	// Output:
	// [done a done b done c done d]
}
