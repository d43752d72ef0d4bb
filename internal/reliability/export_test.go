package reliability

// OnServerRead makes p call read with the size of every chunk it reads from a server.
func OnServerRead(p *Proxy, read func(n int)) { p.serverRead.Store(&read) }
