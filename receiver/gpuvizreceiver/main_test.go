package gpuvizreceiver

import "flag"

var update = flag.Bool("update", false, "rewrite golden files from the current output")
