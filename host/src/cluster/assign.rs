//! The deterministic division of work: which shard a store key falls in, and
//! which member a shard belongs to (rendezvous hashing). Every host computes
//! the same answers from the same member list, with no coordination.

/// FNV-1a, then a SplitMix64 finaliser: stable across hosts, releases and
/// platforms (unlike `std`'s randomly seeded hasher), and well mixed enough
/// for rendezvous scores.
fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            h ^= u64::from(*byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The shard of an object, from its store key.
pub fn shard_of(store_key: &str, shards: u32) -> u32 {
    (hash(&[store_key.as_bytes()]) % u64::from(shards.max(1))) as u32
}

/// The member a shard belongs to: the highest rendezvous score. Adding or
/// removing one member moves only the shards it wins or held.
pub fn owner_of(shard: u32, members: &[String]) -> Option<&str> {
    let shard = shard.to_le_bytes();
    members
        .iter()
        .max_by_key(|m| (hash(&[m.as_bytes(), &shard]), m.as_str()))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(
            shard_of("/registry/a/b/c", 64),
            shard_of("/registry/a/b/c", 64)
        );
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            counts[shard_of(&format!("/registry/g/things/default/obj-{i}"), 16) as usize] += 1;
        }
        // 1,000 expected per shard; a decent hash stays well within ±20%.
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn rendezvous_spreads_and_moves_little() {
        let three = members(&["host-a", "host-b", "host-c"]);
        let mut per_member = std::collections::HashMap::new();
        for shard in 0..300 {
            *per_member
                .entry(owner_of(shard, &three).unwrap())
                .or_insert(0) += 1;
        }
        assert_eq!(per_member.len(), 3);
        assert!(
            per_member.values().all(|&n| (70..130).contains(&n)),
            "{per_member:?}"
        );

        // Removing host-c moves exactly host-c's shards; the rest stay put.
        let two = members(&["host-a", "host-b"]);
        for shard in 0..300 {
            let before = owner_of(shard, &three).unwrap();
            let after = owner_of(shard, &two).unwrap();
            if before != "host-c" {
                assert_eq!(before, after, "shard {shard} moved needlessly");
            }
        }
        // The order of the member list does not matter.
        let shuffled = members(&["host-c", "host-a", "host-b"]);
        for shard in 0..300 {
            assert_eq!(owner_of(shard, &three), owner_of(shard, &shuffled));
        }
        assert_eq!(owner_of(1, &[]), None);
    }
}
