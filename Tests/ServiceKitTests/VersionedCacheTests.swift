import ServiceKitCore
import Testing

@Suite struct VersionedCacheTests {
    /// A value comes back only for the version it was made from; a newer one replaces it.
    @Test func aValueIsGivenOnlyForItsVersion() {
        let cache = VersionedCache<String, String>(capacity: 10)
        #expect(cache.value(for: "a", version: 1) == nil)
        cache.store("one", for: "a", version: 1)
        #expect(cache.value(for: "a", version: 1) == "one")
        #expect(cache.value(for: "a", version: 2) == nil, "the data changed since")
        cache.store("two", for: "a", version: 2)
        #expect(cache.value(for: "a", version: 2) == "two" && cache.value(for: "a", version: 1) == nil)
        #expect(cache.count == 1)
    }

    /// At most two generations of `capacity`: what was asked for since the last filling stays, the
    /// rest goes.
    @Test func whatIsNotAskedForGoes() {
        let cache = VersionedCache<Int, Int>(capacity: 2)
        cache.store(10, for: 1, version: 1)
        cache.store(20, for: 2, version: 1)
        cache.store(30, for: 3, version: 1)  // 1 and 2 become the older generation
        #expect(cache.value(for: 1, version: 1) == 10, "moved back to the newer")
        cache.store(40, for: 4, version: 1)  // the newer (3, 1) was full: 2 goes
        #expect(cache.value(for: 2, version: 1) == nil)
        #expect(cache.value(for: 1, version: 1) == 10 && cache.value(for: 3, version: 1) == 30 && cache.value(for: 4, version: 1) == 40)
        #expect(cache.count <= 4)
        for key in 5..<100 { cache.store(key, for: key, version: 1) }
        #expect(cache.count <= 4)
    }

    /// `orMake` makes a value once per version, and every time for data without a version yet.
    @Test func aValueIsMadeOncePerVersion() async {
        let cache = VersionedCache<String, Int>(capacity: 10)
        var made = 0
        func make() async -> Int {
            made += 1
            return made
        }
        #expect(await cache.value(for: "a", version: 1, orMake: make) == 1)
        #expect(await cache.value(for: "a", version: 1, orMake: make) == 1, "kept")
        #expect(await cache.value(for: "a", version: 2, orMake: make) == 2, "made again for a new version")
        #expect(await cache.value(for: "a", version: nil, orMake: make) == 3)
        #expect(await cache.value(for: "a", version: nil, orMake: make) == 4, "nothing kept without a version")
        #expect(made == 4 && cache.value(for: "a", version: 2) == 2)
    }

    /// `latest` gives a value whatever its version, until it is forgotten; forgetting one key leaves
    /// the others, forgetting all leaves none.
    @Test func forgottenValuesAreGone() {
        let cache = VersionedCache<String, String>(capacity: 10)
        cache.store("one", for: "a", version: 1)
        cache.store("bee", for: "b", version: 7)
        #expect(cache.latest(for: "a") == "one" && cache.latest(for: "b") == "bee" && cache.latest(for: "c") == nil)
        cache.forget("a")
        #expect(cache.latest(for: "a") == nil && cache.value(for: "a", version: 1) == nil)
        #expect(cache.latest(for: "b") == "bee")
        cache.forgetAll()
        #expect(cache.latest(for: "b") == nil && cache.count == 0)
    }

    /// A value made from data read before its key was forgotten (or everything was) is not kept:
    /// the data may have changed after it was read, and the change's forgetting has already gone by.
    /// Another key's forgetting refuses it only if the two share a stripe.
    @Test func aValueReadBeforeItsForgettingIsNotKept() async {
        let cache = VersionedCache<Int, String>(capacity: 10)
        let epoch = cache.epoch(for: 1)
        cache.forget(1)
        #expect(await cache.value(for: 1, version: 1, unlessForgottenSince: epoch) { "stale" } == "stale", "still answered")
        #expect(cache.latest(for: 1) == nil, "not kept")
        cache.store("stale", for: 1, version: 1, unlessForgottenSince: epoch)
        #expect(cache.latest(for: 1) == nil)

        // A key of another stripe: forgetting it leaves key 1's epoch as it was.
        var kept = false
        for other in 2..<1_000 where !kept {
            let before = cache.epoch(for: 1)
            cache.forget(other)
            guard cache.epoch(for: 1) == before else { continue }
            #expect(await cache.value(for: 1, version: 1, unlessForgottenSince: before) { "fresh" } == "fresh")
            kept = true
        }
        #expect(kept && cache.latest(for: 1) == "fresh", "kept: only a key of another stripe was forgotten since")

        let beforeAll = cache.epoch(for: 1)
        cache.forgetAll()
        cache.store("stale", for: 1, version: 2, unlessForgottenSince: beforeAll)
        #expect(cache.latest(for: 1) == nil)
    }
}
