import AsyncHTTPClient
import Foundation
import Hummingbird
import Models
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import ServiceLifecycle

/// Boots a service application exactly as `main` does (its own `run()`, so the kit's listener on a
/// real port, not HummingbirdTesting's server), against the test database and Redis, and checks the
/// endpoints every process serves and that a graceful shutdown stops it.
public func assertServiceServesHealth(name: String, build: (ServiceConfig) throws -> some ApplicationProtocol) async throws -> [String] {
    let database = try await TestDatabase.create(services: [name])
    var config = ServiceConfig.test(name: name, database: database, redis: try TestEnvironment.redis(), stream: TestEnvironment.uniqueName("events"))
    config.listener.port = try RedisServer.freePort()
    config.admin.port = try RedisServer.freePort()
    let port = config.listener.port
    let adminPort = config.admin.port
    let app = try build(config)
    var failures = routesAgainstDocument(name: name, app: app)
    let group = ServiceGroup(configuration: .init(services: [app], logger: TestEnvironment.logger))
    let running = Task { try await group.run() }
    do {
        failures += try await checkProcessEndpoints(name: name, port: port, adminPort: adminPort)
    } catch {
        // Not left running for the rest of the suite.
        running.cancel()
        throw error
    }
    await group.triggerGracefulShutdown()
    do {
        try await withDeadline(.seconds(20), "\(name) stopping gracefully") { try await running.value }
    } catch {
        running.cancel()
        throw error
    }
    for open in [port, adminPort] where await RedisServer.accepts(port: open) {
        failures.append("\(name): still answers on \(open) after its shutdown")
    }
    // The schema has the event bus tables and the migrations table.
    let tables = try await withClient(database.config(for: name)) { client in
        var names: [String] = []
        for try await table in try await client.query("SELECT table_name::text FROM information_schema.tables WHERE table_schema = \(name) ORDER BY 1", logger: TestEnvironment.logger).decode(
            String.self)
        {
            names.append(table)
        }
        return names
    }
    for table in ["inbox", "outbox", "schema_migrations"] where !tables.contains(table) {
        failures.append("\(name): schema lacks \(table)")
    }
    return failures
}

/// Routes the kit gives every service that no service's document lists: the document itself
/// (`GET /openapi.yaml`, which the gateway merges into its `/openapi.json`).
let undocumentedKitRoutes: Set<String> = ["GET /openapi.yaml"]

/// Every route the application serves is in its service's OpenAPI document, and every documented
/// operation is served (method and path; parameter names aside), the kit's `undocumentedKitRoutes`
/// aside.
func routesAgainstDocument(name: String, app: some ApplicationProtocol) -> [String] {
    guard let index = (app as? any RouteIndexed)?.routeIndex else { return ["\(name): the application does not list its routes"] }
    func normalized(_ method: String, _ path: String) -> String {
        "\(method.uppercased()) " + path.replacing(#/\{[^}]*\}/#, with: "{}")
    }
    let all = Set(index.routes.map { normalized($0.method, $0.path) })
    var failures = undocumentedKitRoutes.subtracting(all).sorted().map { "\(name): does not serve \($0)" }
    let served = all.subtracting(undocumentedKitRoutes)
    let documented: Set<String>
    do {
        documented = Set(try OpenAPIDocument.operations(of: name.prefix(1).uppercased() + name.dropFirst()).map { normalized($0.method, $0.path) })
    } catch {
        return ["\(name): no OpenAPI document: \(error)"]
    }
    failures += served.subtracting(documented).sorted().map { "\(name): serves \($0), which its document lacks" }
    failures += documented.subtracting(served).sorted().map { "\(name): documents \($0), which it does not serve" }
    return failures
}

/// What every process answers, once its port is open: on the internal port readiness and metrics, on
/// the public port health with `Date` and `Server`, a 404 problem carrying the request id, and a 404
/// for readiness and metrics.
private func checkProcessEndpoints(name: String, port: Int, adminPort: Int) async throws -> [String] {
    var failures: [String] = []
    // The public port opens once migrations are done, and readiness follows. Nutrition's load the
    // food table, which takes most of this bound when every suite runs at once on two cores; the
    // wait ends as soon as the port opens.
    try await waitUntil(.seconds(60)) { await RedisServer.accepts(port: port) }
    var ready = false
    for _ in 0..<200 {
        if let reply = try? await ConcurrentClient.send(port: adminPort, "GET", "/readyz", timeout: .seconds(5)), reply.status == 200 { ready = true; break }
        try await Task.sleep(for: .milliseconds(50))
    }
    guard ready else { return ["\(name): /readyz never became ready"] }
    let health = try await ConcurrentClient.send(port: port, "GET", "/healthz")
    if health.status != 200 { failures.append("\(name): /healthz is \(health.status)") }
    if health.headers["Date"].first?.hasSuffix(" GMT") != true || health.headers["Server"].first != name {
        failures.append("\(name): answers lack Date or Server: \(health.headers)")
    }
    let metrics = try await ConcurrentClient.send(port: adminPort, "GET", "/metrics")
    if !String(buffer: metrics.body).contains("events_outbox_backlog") { failures.append("\(name): /metrics lacks event bus metrics") }
    for path in ["/readyz", "/metrics"] where try await ConcurrentClient.send(port: port, "GET", path).status != 404 {
        failures.append("\(name): the public port serves \(path)")
    }
    // Its own OpenAPI document, as the repository has it, for the gateway to merge.
    let document = try await ConcurrentClient.send(port: port, "GET", "/openapi.yaml")
    let file = TestEnvironment.packageRoot.appendingPathComponent("Services/\(name.prefix(1).uppercased() + name.dropFirst())/openapi.yaml")
    let repositoryText = try String(contentsOf: file, encoding: .utf8)
    if document.status != 200 || String(buffer: document.body) != repositoryText {
        failures.append("\(name): /openapi.yaml is \(document.status), not the repository's openapi.yaml")
    }
    let missing = try await ConcurrentClient.send(port: port, "GET", "/v1/nothing-here", headers: [("X-Request-ID", "boot-test")])
    if missing.status != 404 || missing.headers["Content-Type"].first != Problem.mediaType || missing.headers["X-Request-ID"].first != "boot-test" {
        failures.append("\(name): unknown path is not a 404 problem with the request id")
    }
    return failures
}
