import Foundation
import Hummingbird
import Logging
@testable import ServiceKit
@testable import ServiceKitCore
@testable import ServiceKitDatabase
@testable import ServiceKitEvents
@testable import ServiceKitHTTP
@testable import ServiceKitRedis
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

/// The kit's listener, run as `main` runs it (`ServiceApplication.run()`): processes that share a
/// port, and graceful shutdowns that let the request in flight finish and close idle connections.
@Suite struct HTTPListenerTests {
    /// One running application: its responses name `instance`; `/slow` says when it has started.
    struct Running {
        let group: ServiceGroup
        let task: Task<Void, any Error>
        let slowArrived: AsyncStream<Void>

        func stop() async throws {
            await group.triggerGracefulShutdown()
            try await withDeadline(.seconds(10), "a graceful shutdown") { try await task.value }
        }
    }

    static func start(_ instance: String, port: Int, reusePort: Bool) -> Running {
        let (slowArrived, arrival) = AsyncStream.makeStream(of: Void.self)
        let router = Router()
        router.get("who") { _, _ in instance }
        router.get("slow") { _, _ -> String in
            arrival.yield()
            try await Task.sleep(for: .milliseconds(500))
            return "finished"
        }
        let app = ServiceApplication(
            router: router, listener: .init(host: "127.0.0.1", port: port, reusePort: reusePort),
            serverName: "listener-test", logger: TestEnvironment.logger
        )
        let group = ServiceGroup(configuration: .init(services: [app], logger: TestEnvironment.logger))
        return Running(group: group, task: Task { try await group.run() }, slowArrived: slowArrived)
    }

    /// Asks `/who` on a new connection each time, until `wanted` have all answered or 30 s passed:
    /// a listener starting beside a full parallel run on two cores can be slow to answer.
    static func answers(port: Int, until wanted: Set<String>) async throws -> Set<String> {
        try await waitUntil(.seconds(30)) { await RedisServer.accepts(port: port) }
        var seen: Set<String> = []
        let deadline = ContinuousClock.now + .seconds(30)
        while !wanted.isSubset(of: seen), ContinuousClock.now < deadline {
            if let reply = try? await ConcurrentClient.send(port: port, "GET", "/who", headers: [("Connection", "close")], timeout: .seconds(5)),
                reply.status == 200
            {
                seen.insert(String(buffer: reply.body))
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return seen
    }

    /// Runs `body`; whatever it throws, no application is left running for the rest of the suite.
    /// Each is shut down gracefully, and cancelled only if that does not end it: a cancelled
    /// listener can drop a connection NIO has just accepted for it, which traps the whole run
    /// ("Deinited NIOAsyncWriter without calling finish()", apple/swift-nio#2637).
    static func stopping(_ running: [Running], after body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch {
            for app in running {
                do { try await app.stop() } catch { app.task.cancel() }
            }
            throw error
        }
    }

    @Test func processesThatAskForReusePortShareOnePortAndOneCanLeave() async throws {
        let port = try RedisServer.freePort()
        let first = Self.start("first", port: port, reusePort: true)
        let second = Self.start("second", port: port, reusePort: true)
        try await Self.stopping([first, second]) {
            // The kernel spreads new connections over both listeners.
            #expect(try await Self.answers(port: port, until: ["first", "second"]) == ["first", "second"])

            // Without the option the port is refused, as it always was.
            let third = Self.start("third", port: port, reusePort: false)
            defer { third.task.cancel() }
            await #expect(throws: (any Error).self) { try await withDeadline(.seconds(10), "a refused bind") { try await third.task.value } }

            // One leaves; every new connection reaches the other.
            try await first.stop()
            for _ in 0..<20 {
                let reply = try await ConcurrentClient.send(port: port, "GET", "/who", headers: [("Connection", "close")], timeout: .seconds(5))
                #expect(String(buffer: reply.body) == "second")
            }
            try await second.stop()
            #expect(await !RedisServer.accepts(port: port))
        }
    }

    @Test func aGracefulShutdownFinishesTheRequestInFlightThenStops() async throws {
        let port = try RedisServer.freePort()
        let running = Self.start("only", port: port, reusePort: false)
        try await Self.stopping([running]) {
            #expect(try await Self.answers(port: port, until: ["only"]) == ["only"])
            // Idle keep-alive connections in the client's pool: the shutdown must not wait for them.
            for _ in 0..<4 { _ = try await ConcurrentClient.send(port: port, "GET", "/who", timeout: .seconds(5)) }

            let slow = Task { try await ConcurrentClient.send(port: port, "GET", "/slow", timeout: .seconds(10)) }
            try await withDeadline(.seconds(10), "the slow request reaching its handler") {
                for await _ in running.slowArrived { return }
            }
            try await running.stop()
            let reply = try await slow.value
            #expect(reply.status == 200 && String(buffer: reply.body) == "finished")
            #expect(reply.headers["Date"].first?.hasSuffix(" GMT") == true && reply.headers["Server"].first == "listener-test")
            #expect(await !RedisServer.accepts(port: port))
        }
    }

    @Test func theDateHeaderIsAnIMFFixdate() {
        // 2026-11-26 03:38:16 UTC, a Thursday; and a single-digit day and hour.
        #expect(HTTPDateHeader.format(1_795_664_296) == "Thu, 26 Nov 2026 03:38:16 GMT")
        #expect(HTTPDateHeader.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
    }
}
