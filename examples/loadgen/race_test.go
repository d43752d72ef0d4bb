//go:build race

package main

// raceEnabled: the tests run with -race, so the server they start is built with it too.
const raceEnabled = true
