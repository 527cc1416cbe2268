package keys_test

import (
	"fmt"

	"github.com/allot-dev/allot/gcra/keys"
)

func ExampleKey() {
	tenant, _ := keys.Key("t42", "tenant")
	user, _ := keys.Key("t42", "user", keys.Descriptor{Name: "user", Value: "7"})
	forged, _ := keys.Key("t42}:x", "user", keys.Descriptor{Name: "user", Value: "7:route=/"})
	fmt.Println(tenant)
	fmt.Println(user)
	fmt.Println(forged)
	fmt.Println(keys.HashTag("t42"))
	// Output:
	// allot:v1:{t42}:tenant
	// allot:v1:{t42}:user:user=7
	// allot:v1:{t42%7D%3Ax}:user:user=7%3Aroute%3D%2F
	// {t42}
}
