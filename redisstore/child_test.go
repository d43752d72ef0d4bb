package redisstore_test

const childEnv = "REDISSTORE_CHILD"

func runChild() int { return 2 }
