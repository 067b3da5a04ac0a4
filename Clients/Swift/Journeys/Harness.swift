import FoodBackendAPI
import FoodBackendClient
import Foundation
import HTTPTypes
import OpenAPIRuntime

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What the journeys need from the run: the gateway, the fixtures server (scripts/e2e/test_client.py)
/// and where the called operations are written.
struct Environment {
    static let gateway = URL(string: ProcessInfo.processInfo.environment["FOODBACKEND_URL"] ?? "http://127.0.0.1:8080")!
    static let fixtures = URL(string: ProcessInfo.processInfo.environment["FIXTURES_URL"] ?? "http://127.0.0.1:0")!
    static let coverageFile = ProcessInfo.processInfo.environment["CLIENT_COVERAGE_FILE"]
    /// The stack mixes two releases (scripts/release-matrix sets `E2E_UNSERVED_OPERATIONS`): a
    /// process of the previous one may answer without what this release added to an answer.
    static let mixesReleases = ProcessInfo.processInfo.environment["E2E_UNSERVED_OPERATIONS"] != nil
}

struct JourneyFailure: Error, CustomStringConvertible {
    let description: String
}

func expect(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) throws {
    if !condition { throw JourneyFailure(description: "\(file):\(line): \(message())") }
}

/// Every operation the client sent and got an answer to, whatever the answer: the coverage check's input.
final class CalledOperations: ClientMiddleware, @unchecked Sendable {
    private let lock = NSLock()
    private var called: Set<String> = []
    private var last: String?

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        let answer = try await next(request, body, baseURL)
        lock.withLock {
            called.insert(operationID)
            last = "\(operationID) answered \(answer.0.status.code)"
        }
        return answer
    }

    var all: [String] { lock.withLock { called.sorted() } }

    /// The last operation answered and its status: where a failed journey stopped.
    var lastAnswered: String? { lock.withLock { last } }
}

let calledOperations = CalledOperations()

/// A new app on a new device: the client with its own session, in memory.
func newApp() -> FoodBackend {
    FoodBackend(baseURL: Environment.gateway, tokenStore: InMemoryTokenStore(), configuration: .init(middlewares: [calledOperations]))
}

func uniqueEmail(_ who: String) -> String {
    "swift-\(who)-\(UUID().uuidString.prefix(10).lowercased())@example.com"
}

/// Asks the fixtures server; its answer's JSON object.
func fixture(_ path: String, _ body: [String: Any]) async throws -> [String: Any] {
    var request = URLRequest(url: Environment.fixtures.appendingPathComponent(path))
    request.httpMethod = "POST"
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    request.httpBody = try JSONSerialization.data(withJSONObject: body)
    request.timeoutInterval = 90
    let (data, response) = try await URLSession.shared.data(for: request)
    let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw JourneyFailure(description: "fixture \(path): \(object)") }
    return object
}

/// The plain text of the mails to `address` whose subject starts with `subject`, once `count` arrived.
func mails(to address: String, subject: String = "", count: Int = 1) async throws -> [String] {
    let texts = try await fixture("mail", ["to": address, "subject": subject, "count": count])["texts"] as? [String] ?? []
    try expect(texts.count >= count, "\(count) mail(s) to \(address) with subject \(subject)…, got \(texts.count)")
    return texts
}

/// The first capture of `pattern` in `text`.
func capture(_ pattern: String, in text: String) throws -> String {
    let regex = try NSRegularExpression(pattern: pattern)
    guard let match = regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)), match.numberOfRanges > 1,
        let range = Range(match.range(at: 1), in: text)
    else { throw JourneyFailure(description: "no \(pattern) in: \(text.prefix(400))") }
    return String(text[range])
}

/// Polls until `body` gives a value: what another service learns by an event comes a moment later.
func eventually<T>(_ what: String, seconds: Double = 30, _ body: () async throws -> T?) async throws -> T {
    let deadline = Date().addingTimeInterval(seconds)
    var last: (any Error)?
    while Date() < deadline {
        do {
            if let value = try await body() { return value }
        } catch {
            last = error
        }
        try await Task.sleep(for: .milliseconds(200))
    }
    throw JourneyFailure(description: "\(what) did not happen within \(seconds)s" + (last.map { " (last error: \($0))" } ?? ""))
}

/// Runs one step of a journey, naming it in the failure.
func step<T>(_ label: String, _ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch {
        throw JourneyFailure(description: "\(label): \(error)")
    }
}

/// Expects `body` to fail with the server's `code`.
func expectProblem<T>(_ code: String, _ what: String, _ body: () async throws -> T) async throws {
    do {
        _ = try await body()
    } catch let error as FoodBackendError {
        try expect(error.rawCode == code, "\(what): expected \(code), got \(error)")
        return
    }
    throw JourneyFailure(description: "\(what): expected \(code), but it succeeded")
}

func text(_ body: HTTPBody) async throws -> String {
    String(decoding: try await Data(collecting: body, upTo: 4 * 1024 * 1024), as: UTF8.self)
}

/// A user of the app: a signed-in client and who it is.
struct AppUser {
    let app: FoodBackend
    let email: String
    var password: String
    let id: String
}

func signUp(_ who: String, displayName: String? = nil, verified: Bool = false) async throws -> AppUser {
    let app = newApp()
    let email = uniqueEmail(who)
    let password = "swift journey \(who) password"
    let signIn = try await app.signUp(email: email, password: password, displayName: displayName)
    let user = AppUser(app: app, email: email, password: password, id: signIn.user.id)
    if verified { try await verifyFromTheMail(user) }
    return user
}

/// The verification mail's token sent from the app, and the session refreshed so its token says so.
func verifyFromTheMail(_ user: AppUser) async throws {
    let mail = try await mails(to: user.email, subject: "Confirm").last!
    let token = try capture("verify-email\\?token=([A-Za-z0-9_-]+)", in: mail)
    _ = try await user.app.send { try await $0.postV1AuthEmailVerify(body: .json(.init(token: token))).ok.body.json }
    try await user.app.refreshSession()
    try await expect(user.app.currentSession?.emailVerified == true, "the refreshed token says the address is verified")
}

/// Opens the user's live stream in the background, and waits until it is connected.
final class StreamReader: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [LiveEvent] = []
    private var task: Task<Void, Never>?
    private var connected = false

    init(_ app: FoodBackend) async throws {
        let stream = app.liveEvents()
        task = Task {
            do {
                for try await event in stream {
                    self.lock.withLock {
                        if case .connected = event.kind { self.connected = true } else { self.events.append(event) }
                    }
                }
            } catch {}
        }
        _ = try await eventually("the live stream connected", seconds: 15) { lock.withLock { connected ? true : nil } }
    }

    func next<T>(_ what: String, seconds: Double = 20, _ match: @escaping (LiveEvent) -> T?) async throws -> T {
        try await eventually("\(what) on the live stream", seconds: seconds) {
            lock.withLock { events.lazy.compactMap(match).first }
        }
    }

    func close() { task?.cancel() }
}

func same(_ a: String?, _ b: String?) -> Bool { a?.lowercased() == b?.lowercased() }

/// A 1×1 PNG (a white pixel), as a photo picker would hand the app one.
let onePixelPNG = Data(base64Encoded: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC")!
