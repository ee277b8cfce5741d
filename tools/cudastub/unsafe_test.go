package cudastub_test

import "unsafe"

func unsafeAdd(p *byte, n uintptr) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(p), n) }
