package images_test

import (
	"context"
	"fmt"
	"os"

	"github.com/allot-dev/allot/deploy/images"
)

// Ensure builds what is missing and returns the references to run. (Not
// run as a test: it needs a Docker engine; `make images` runs it.)
func ExampleEnsure() {
	set, err := images.Ensure(context.Background(), images.Config{Log: os.Stderr})
	if err != nil {
		fmt.Println("images:", err)
		return
	}
	fmt.Println(set.Allot, set.Etcd, set.Redis)
}
