//go:build !race

package commands_test

// race says whether the race detector is on.
const race = false
