package redistopo

import (
	"context"
	"fmt"
	"strings"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag (the
// part between the first '{' and the next '}', when not empty) or of the whole key,
// modulo Slots, as the cluster specification gives it.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}

// SlotMap tells which node serves each slot as master.
type SlotMap [Slots]*Server

// SlotMap returns which node serves each slot as master, as a running node sees it now.
func (c *Cluster) SlotMap(ctx context.Context) (*SlotMap, error) {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		cl := s.client()
		ranges, err := cl.ClusterSlots(ctx).Result()
		_ = cl.Close()
		if err != nil {
			continue
		}
		m := new(SlotMap)
		for _, r := range ranges {
			if len(r.Nodes) == 0 {
				continue
			}
			owner := c.byAddr(r.Nodes[0].Addr)
			for slot := r.Start; slot <= r.End && slot < Slots; slot++ {
				m[slot] = owner
			}
		}
		for slot, owner := range m {
			if owner == nil {
				return nil, fmt.Errorf("redistopo: no master serves slot %d", slot)
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("redistopo: no running node answered CLUSTER SLOTS")
}

// Of returns the node serving key's slot.
func (m *SlotMap) Of(key string) *Server { return m[Slot(key)] }
