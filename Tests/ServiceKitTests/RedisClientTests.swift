import Foundation
import NIOCore
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Synchronization
import Testing
import TestSupport

@Suite struct RedisClientTests {
    @Test func commandsRepliesAndBinarySafety() async throws {
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        let key = TestEnvironment.uniqueName("k")
        #expect(try await redis.send("SET", RedisArgument(key), "hello").string == "OK")
        #expect(try await redis.send("GET", RedisArgument(key)).string == "hello")
        #expect(try await redis.send("GET", RedisArgument(key + "-missing")).isNull)
        let binary: [UInt8] = [0, 13, 10, 255, 36, 42]
        try await redis.send(["SET", RedisArgument(key), RedisArgument(binary)])
        #expect(try await redis.send("GET", RedisArgument(key)) == .bulkString(binary))
        #expect(try await redis.send("INCR", RedisArgument(key + "-n")).int == 1)
        #expect(try await redis.send("RPUSH", RedisArgument(key + "-l"), "a", "b").int == 2)
        #expect(try await redis.send("LRANGE", RedisArgument(key + "-l"), "0", "-1") == .array([.bulkString(Array("a".utf8)), .bulkString(Array("b".utf8))]))
        await #expect(throws: RedisError.server("ERR unknown command 'NOPE', with args beginning with: ")) {
            try await redis.send("NOPE")
        }
        // An error reply does not break the connection's order.
        #expect(try await redis.send("PING").string == "PONG")
    }

    @Test func aThousandConcurrentCallsGetTheirOwnRepliesInOrder() async throws {
        var config = try TestEnvironment.redis()
        config.poolSize = 2
        let redis = RedisClient(configuration: config, logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        let prefix = TestEnvironment.uniqueName("p")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<1_000 {
                group.addTask {
                    let echoed = try await redis.send("ECHO", RedisArgument("value-\(index)"))
                    #expect(echoed.string == "value-\(index)")
                    let count = try await redis.send("INCRBY", RedisArgument("\(prefix):\(index % 10)"), RedisArgument(index))
                    #expect(count.int != nil)
                }
            }
            try await group.waitForAll()
        }
        var total = 0
        for bucket in 0..<10 { total += try await redis.send("GET", RedisArgument("\(prefix):\(bucket)")).int ?? 0 }
        #expect(total == (0..<1_000).reduce(0, +))
    }

    @Test func publishAndSubscribe() async throws {
        let config = try TestEnvironment.redis()
        let redis = RedisClient(configuration: config, logger: TestEnvironment.logger)
        let subscriber = RedisSubscriber(configuration: config, logger: TestEnvironment.logger)
        let channel = TestEnvironment.uniqueName("ch")
        let runner = Task { try await subscriber.run() }
        defer { runner.cancel(); Task { await redis.close() } }
        let messages = subscriber.subscribe(channel)
        try await waitUntil { try await redis.publish(channel, "probe") > 0 }
        try await redis.publish(channel, "hello")
        var received: [String] = []
        for await message in messages {
            received.append(message.text)
            if message.text == "hello" { break }
        }
        #expect(received.last == "hello")
    }

    /// `PSUBSCRIBE`: every channel the pattern matches, with the channel's name, and a call each time
    /// Redis confirms the subscription, again after the server comes back.
    /// What was published before the server is killed is read before it is: the publisher's reply
    /// comes before the subscriber's copy is sent, and a server killed between the two loses the copy.
    @Test(.timeLimit(.minutes(1))) func patternSubscriptionsReceiveEveryMatchingChannel() async throws {
        let server = try RedisServer()
        try await server.start()
        let redis = RedisClient(configuration: server.configuration, logger: TestEnvironment.logger)
        let subscriber = RedisSubscriber(configuration: server.configuration, logger: TestEnvironment.logger)
        let runner = Task { try await subscriber.run() }
        defer { runner.cancel(); Task { await redis.close() } }
        let confirmations = Confirmations()
        let messages = subscriber.psubscribe("room:*") { _ = confirmations.count.add(1, ordering: .relaxed) }
        #expect(subscriber.patternCount == 1 && subscriber.channelCount == 0)
        try await waitUntil { confirmations.count.load(ordering: .relaxed) == 1 }
        try await redis.publish("room:a", "one")
        try await redis.publish("hall:a", "elsewhere")
        try await redis.publish("room:b", "two")
        var reader = messages.makeAsyncIterator()
        var received: [RedisMessage] = []
        for _ in 0..<2 { if let message = await reader.next() { received.append(message) } }

        try await server.stop()
        try await server.start()
        try await waitUntil { confirmations.count.load(ordering: .relaxed) == 2 }
        try await waitUntil { (try? await redis.send("PING").string) == "PONG" }
        try await redis.publish("room:c", "three")
        if let message = await reader.next() { received.append(message) }
        #expect(received.map(\.channel) == ["room:a", "room:b", "room:c"] && received.map(\.text) == ["one", "two", "three"])
        try await server.stop()
    }

    @Test func countersExpireAndScriptsRun() async throws {
        let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
        defer { Task { await redis.close() } }
        let key = TestEnvironment.uniqueName("rate")
        #expect(try await redis.incrementWithExpiry(key, window: .seconds(60)) == 1)
        #expect(try await redis.incrementWithExpiry(key, window: .seconds(60)) == 2)
        let ttl = try #require(try await redis.pttl(key))
        #expect(ttl > 50_000 && ttl <= 60_000)
        #expect(try await redis.eval("return ARGV[1] .. KEYS[1]", keys: ["k"], arguments: ["v"]).string == "vk")
    }

    /// The server falls silent with the connection open (its host gone, a partition): the
    /// subscriber's pings go unanswered, it leaves the connection and subscribes again once the
    /// server answers, so its listeners hear of the gap instead of waiting on a dead connection.
    @Test(.timeLimit(.minutes(1))) func aServerThatFallsSilentIsLeftAndSubscribedAgain() async throws {
        try await Self.withOwnServer(commandTimeout: .milliseconds(500), pingInterval: .milliseconds(200)) { server, redis, subscriber in
            let confirmations = Confirmations()
            let messages = subscriber.psubscribe("room:*") { _ = confirmations.count.add(1, ordering: .relaxed) }
            try await waitUntil { confirmations.count.load(ordering: .relaxed) == 1 }
            server.pause()
            // Several times what the subscriber takes to give the connection up.
            try await Task.sleep(for: .seconds(3))
            server.resume()
            try await waitUntil(.seconds(20)) { confirmations.count.load(ordering: .relaxed) == 2 }
            try await waitUntil { try await redis.publish("room:a", "after") > 0 }
            var reader = messages.makeAsyncIterator()
            #expect(await reader.next()?.text == "after")
        }
    }

    /// A pattern's listener hears each answer to the subscriber's `PING`, with when it was sent, but
    /// only on a connection where Redis confirmed the pattern: not the answers to pings sent before
    /// it asked (here the connection already holds a channel, and the server, paused, answers the
    /// pings it held only after it resumes, before the pattern's confirmation), and again after the
    /// server comes back and confirms it anew.
    @Test(.timeLimit(.minutes(1))) func aPatternsListenerHearsThePingsAnsweredOnceSubscribed() async throws {
        try await Self.withOwnServer(commandTimeout: .seconds(10), pingInterval: .milliseconds(50)) { server, redis, subscriber in
            let channelMessages = subscriber.subscribe("hall")
            try await waitUntil { try await redis.publish("hall", "up") > 0 }
            let heard = Heard()
            server.pause()
            try await Task.sleep(for: .milliseconds(300))
            let asked = Date()
            let messages = subscriber.psubscribe(
                "room:*", onSubscribed: { heard.append("subscribed") }, onAlive: { sentAt in heard.append(sentAt >= asked ? "alive" : "alive before") })
            try await Task.sleep(for: .milliseconds(300))
            server.resume()
            try await waitUntil { heard.entries.count(where: { $0 == "alive" }) >= 3 }
            #expect(heard.entries.first == "subscribed" && !heard.entries.contains("alive before"), "\(heard.entries)")
            try await server.stop()
            try await server.start()
            try await waitUntil(.seconds(20)) { heard.entries.split(separator: "subscribed").count == 2 && heard.entries.last == "alive" }
            #expect(heard.entries.count(where: { $0 == "subscribed" }) == 2)
            _ = (channelMessages, messages)
        }
    }

    /// A pattern whose listeners left before Redis confirmed it, and which another listener then
    /// asked for, is confirmed by the answer to the second `PSUBSCRIBE`, not by the first's: Redis
    /// answers the first, then the `PUNSUBSCRIBE` (the subscription is gone), then the second. The
    /// server is paused so that all three are answered after they were written.
    @Test(.timeLimit(.minutes(1))) func aPatternAskedForAgainIsConfirmedByTheLastAnswer() async throws {
        try await Self.withOwnServer(commandTimeout: .seconds(10), pingInterval: .milliseconds(200)) { server, redis, subscriber in
            let channelMessages = subscriber.subscribe("hall")
            try await waitUntil { try await redis.publish("hall", "up") > 0 }
            server.pause()
            var first: AsyncStream<RedisMessage>? = subscriber.psubscribe("room:*") {}
            #expect(first != nil && subscriber.patternCount == 1)
            first = nil
            #expect(subscriber.patternCount == 0)
            let heard = Heard()
            let messages = subscriber.psubscribe("room:*") { heard.append("subscribed") }
            server.resume()
            // The three may reach the server over more than one read, so the first message can come
            // between the answers; the second is published after the last answer was sent.
            try await waitUntil { try await redis.publish("room:a", "after") > 0 }
            var reader = messages.makeAsyncIterator()
            #expect(await reader.next()?.text == "after")
            try await waitUntil { !heard.entries.isEmpty }
            try await redis.publish("room:a", "marker")
            while let message = await reader.next(), message.text != "marker" {}
            #expect(heard.entries == ["subscribed"])
            _ = channelMessages
        }
    }

    /// A listener that joins a pattern Redis has already confirmed hears so at once (nothing more will
    /// be confirmed for it until the connection is made again), and hears of no answer to a `PING`
    /// sent before it joined: the server is paused while it joins, holding the pings sent until then.
    @Test(.timeLimit(.minutes(1))) func aListenerJoiningAConfirmedPatternHearsItIsSubscribed() async throws {
        try await Self.withOwnServer(commandTimeout: .seconds(10), pingInterval: .milliseconds(50)) { server, redis, subscriber in
            let heard = Heard()
            let joinerHeard = Heard()
            let first = subscriber.psubscribe("room:*") { heard.append("first") }
            try await waitUntil { heard.entries == ["first"] }
            server.pause()
            try await Task.sleep(for: .milliseconds(300))
            let joined = Date()
            let second = subscriber.psubscribe(
                "room:*", onSubscribed: { joinerHeard.append("subscribed") },
                onAlive: { sentAt in joinerHeard.append(sentAt >= joined ? "alive" : "alive before") })
            #expect(joinerHeard.entries == ["subscribed"])
            server.resume()
            try await waitUntil { joinerHeard.entries.count(where: { $0 == "alive" }) >= 3 }
            #expect(joinerHeard.entries.first == "subscribed" && !joinerHeard.entries.contains("alive before"), "\(joinerHeard.entries)")
            try await redis.publish("room:a", "both")
            var firstReader = first.makeAsyncIterator()
            var secondReader = second.makeAsyncIterator()
            #expect(await firstReader.next()?.text == "both")
            #expect(await secondReader.next()?.text == "both")
            #expect(heard.entries == ["first"] && joinerHeard.entries.count(where: { $0 == "subscribed" }) == 1)
        }
    }

    /// A Redis server of the test's own, a client of it, and a subscriber to it with a short
    /// command timeout and ping interval, running while `body` does.
    static func withOwnServer(
        commandTimeout: TimeAmount, pingInterval: Duration, _ body: (RedisServer, RedisClient, RedisSubscriber) async throws -> Void
    ) async throws {
        let server = try RedisServer()
        try await server.start()
        var config = server.configuration
        config.commandTimeout = commandTimeout
        let redis = RedisClient(configuration: server.configuration, logger: TestEnvironment.logger)
        let subscriber = RedisSubscriber(configuration: config, logger: TestEnvironment.logger, pingInterval: pingInterval)
        let runner = Task { try await subscriber.run() }
        defer { runner.cancel(); Task { await redis.close() } }
        try await body(server, redis, subscriber)
        try await server.stop()
    }

    /// A subscriber with nothing subscribed is answered `+PONG`, not the subscribed form: it is
    /// alive all the same, and keeps its connection. Misread, each ping would end in the command
    /// timeout and a new connection, once for each second of the wait; one is allowed, as a full
    /// parallel run on two cores can hold a ping's answer past the timeout.
    @Test(.timeLimit(.minutes(1))) func aSubscriberWithNoListenerKeepsItsConnection() async throws {
        try await Self.withOwnServer(commandTimeout: .seconds(1), pingInterval: .milliseconds(100)) { _, redis, _ in
            func connectionsReceived() async throws -> Int? {
                let info = try await redis.send("INFO", "stats").string ?? ""
                return info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("total_connections_received:") }.flatMap { Int($0.split(separator: ":")[1]) }
            }
            try await waitUntil { try await redis.send("CLIENT", "LIST").string?.contains("cmd=ping") == true }
            let before = try #require(try await connectionsReceived())
            try await Task.sleep(for: .seconds(4))
            let after = try #require(try await connectionsReceived())
            #expect(after - before <= 1, "the subscriber reconnected \(after - before) times")
        }
    }

    @Test func recoversAfterTheServerRestartsMidTest() async throws {
        let server = try RedisServer()
        try await server.start()
        let redis = RedisClient(configuration: server.configuration, logger: TestEnvironment.logger)
        let subscriber = RedisSubscriber(configuration: server.configuration, logger: TestEnvironment.logger)
        let runner = Task { try await subscriber.run() }
        defer { runner.cancel(); Task { await redis.close() } }
        let messages = subscriber.subscribe("restart-test")
        try await waitUntil { try await redis.publish("restart-test", "before") > 0 }

        try await server.stop()
        await #expect(throws: RedisError.self) { try await redis.send("PING") }
        try await server.start()

        // Commands and the subscription come back without restarting anything here.
        try await waitUntil { (try? await redis.send("PING").string) == "PONG" }
        try await waitUntil { try await redis.publish("restart-test", "after") > 0 }
        var sawAfter = false
        for await message in messages where message.text == "after" {
            sawAfter = true
            break
        }
        #expect(sawAfter)
        try await server.stop()
    }
}

/// Counts a subscription's confirmations from the subscriber's callback.
final class Confirmations: Sendable {
    let count = Atomic<Int>(0)
}

/// What a listener heard, in order.
private final class Heard: Sendable {
    private let log = Mutex<[String]>([])
    func append(_ entry: String) { log.withLock { $0.append(entry) } }
    var entries: [String] { log.withLock { $0 } }
}
