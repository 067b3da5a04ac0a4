import Foundation
import HTTPTypes
import Hummingbird
import Images
import NIOCore
import Synchronization
import TestSupport

/// A local server that answers as Google's Gemini API (`POST /v1beta/models/{model}:generateContent`)
/// and as the Chat Completions API (`POST /v1/chat/completions`) are documented to, in each shape the
/// analysis must handle, and keeps what it was sent so that a test can look at it.
final class VisionStandIn: Sendable {
    enum Behaviour: Sendable {
        /// 200 with this text as the model's answer.
        case answer(String)
        /// 429 with `Retry-After` (nil: none), the API's error body.
        case rateLimited(retryAfter: String?)
        /// 500, the API's error body.
        case serverError
        /// A key the API does not take: Gemini's 400 `INVALID_ARGUMENT`, Chat Completions' 401
        /// `invalid_api_key`.
        case keyRefused
        /// Answers after this long.
        case slow(Duration, then: String)
        /// Answers once the gate is opened.
        case held(Gate, then: String)
        /// 200 with a body that is not JSON at all.
        case notJSON
        /// Gemini: `promptFeedback.blockReason`; Chat Completions: `message.refusal`.
        case blocked
        /// Gemini: a candidate stopped with `finishReason: SAFETY` and no text; Chat Completions:
        /// `finish_reason: content_filter`.
        case filteredAnswer
        /// The output's tokens spent (a thinking model's thoughts among them) before any text:
        /// Gemini's `finishReason: MAX_TOKENS` without parts; Chat Completions' `finish_reason:
        /// length` with empty content.
        case tokensSpent
    }

    /// What a held answer waits for: the test opens it.
    final class Gate: Sendable {
        private let isOpen = Mutex(false)
        init() {}
        func open() { isOpen.withLock { $0 = true } }
        func wait() async throws {
            while !isOpen.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        }
    }

    struct Received: Sendable {
        var path: String
        var headers: HTTPFields
        var body: Data
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    let server = LocalServer()
    private let queue = Mutex<[Behaviour]>([])
    private let fallback = Mutex<Behaviour>(.answer(VisionStandIn.plate))
    private let log = Mutex<[Received]>([])

    /// Two foods, as a model names them, with plausible per-100 g values.
    static let plate = """
        {"meal_name": "Chicken with rice and broccoli", "items": [
          {"name": "grilled chicken breast", "grams": 150, "confidence": 0.9, "tags": ["poultry", "meat"],
           "per_100g": {"calories": 165, "protein_g": 31, "carbs_g": 0, "fat_g": 3.6, "fiber_g": 0, "sugar_g": 0, "saturated_fat_g": 1, "sodium_mg": 74}},
          {"name": "white rice, cooked", "grams": 200, "confidence": 0.8, "tags": ["grain"],
           "per_100g": {"calories": 130, "protein_g": 2.7, "carbs_g": 28, "fat_g": 0.3, "fiber_g": 0.4, "sugar_g": 0.1, "saturated_fat_g": null, "sodium_mg": 1}}
        ]}
        """
    static let noFood = #"{"meal_name": "", "items": []}"#
    /// JSON, but not the schema's: an item without grams or nutrients.
    static let schemaBreaking = #"{"meal_name": "Soup", "items": [{"name": "soup", "confidence": "high"}]}"#
    static let notJSONText = "Here is your meal: chicken and rice."
    /// The plate, its names with characters no one typed: a NUL (which PostgreSQL does not store), a
    /// zero-width space, a right-to-left override; and a meal name of 300 emoji.
    static let plateWithStrayCharacters =
        plate
        .replacingOccurrences(of: "grilled chicken breast", with: #"grilled\u0000 chicken\u200b breast"#)
        .replacingOccurrences(of: "white rice, cooked", with: #"\u202ewhite rice, cooked"#)
        .replacingOccurrences(of: "Chicken with rice and broccoli", with: String(repeating: "🍗", count: 300))

    var baseURL: String { server.baseURL }
    var received: [Received] { log.withLock { $0 } }

    func next(_ behaviours: Behaviour...) { queue.withLock { $0 += behaviours } }
    func always(_ behaviour: Behaviour) { fallback.withLock { $0 = behaviour } }

    private func take() -> Behaviour {
        queue.withLock { $0.isEmpty ? nil : $0.removeFirst() } ?? fallback.withLock { $0 }
    }

    static func start() async throws -> VisionStandIn {
        let standIn = VisionStandIn()
        let router = Router()
        router.post("v1beta/models/:call") { request, context in try await standIn.answer(request, context: context, gemini: true) }
        router.post("v1/chat/completions") { request, context in try await standIn.answer(request, context: context, gemini: false) }
        try await standIn.server.start(router, label: "vision-stand-in")
        return standIn
    }

    func stop() { server.stop() }

    private func json(_ status: HTTPResponse.Status, _ object: Any, headers: HTTPFields = [:]) throws -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: object))))
    }

    private func answer(_ request: Request, context: BasicRequestContext, gemini: Bool) async throws -> Response {
        let body = try await request.body.collect(upTo: 32 << 20)
        log.withLock { $0.append(Received(path: request.uri.path, headers: request.headers, body: Data(buffer: body))) }
        var behaviour = take()
        if case .slow(let wait, let then) = behaviour {
            try await Task.sleep(for: wait)
            behaviour = .answer(then)
        }
        if case .held(let gate, let then) = behaviour {
            try await gate.wait()
            behaviour = .answer(then)
        }
        switch behaviour {
        case .answer(let text):
            if gemini {
                return try json(
                    .ok,
                    [
                        "candidates": [["content": ["parts": [["text": text]], "role": "model"], "finishReason": "STOP", "index": 0]],
                        "usageMetadata": ["promptTokenCount": 1290, "candidatesTokenCount": 160, "totalTokenCount": 1450], "modelVersion": "gemini-test",
                    ])
            }
            return try json(
                .ok,
                [
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 1_764_300_000, "model": "vision-test",
                    "choices": [["index": 0, "message": ["role": "assistant", "content": text, "refusal": NSNull()], "finish_reason": "stop"]],
                    "usage": ["prompt_tokens": 1200, "completion_tokens": 150, "total_tokens": 1350],
                ])
        case .rateLimited(let retryAfter):
            let headers: HTTPFields = retryAfter.map { [.retryAfter: $0] } ?? [:]
            if gemini {
                return try json(
                    .tooManyRequests, ["error": ["code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"]],
                    headers: headers)
            }
            return try json(
                .tooManyRequests,
                ["error": ["message": "Rate limit reached for requests", "type": "requests", "param": NSNull(), "code": "rate_limit_exceeded"]], headers: headers)
        case .serverError:
            if gemini { return try json(.internalServerError, ["error": ["code": 500, "message": "An internal error has occurred.", "status": "INTERNAL"]]) }
            return try json(.internalServerError, ["error": ["message": "The server had an error while processing your request.", "type": "server_error"]])
        case .keyRefused:
            if gemini {
                return try json(
                    .badRequest,
                    [
                        "error": [
                            "code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT",
                            "details": [["@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"]],
                        ]
                    ])
            }
            return try json(
                .unauthorized,
                ["error": ["message": "Incorrect API key provided: test-key.", "type": "invalid_request_error", "param": NSNull(), "code": "invalid_api_key"]])
        case .notJSON:
            return Response(status: .ok, headers: [.contentType: "text/html"], body: .init(byteBuffer: ByteBuffer(string: "<html>upstream proxy error</html>")))
        case .blocked:
            if gemini {
                return try json(
                    .ok,
                    [
                        "promptFeedback": ["blockReason": "SAFETY", "safetyRatings": [["category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"]]],
                        "modelVersion": "gemini-test",
                    ])
            }
            return try json(
                .ok,
                [
                    "id": "chatcmpl-test", "object": "chat.completion", "model": "vision-test",
                    "choices": [["index": 0, "message": ["role": "assistant", "content": NSNull(), "refusal": "I'm sorry, I can't help with that."], "finish_reason": "stop"]],
                ])
        case .filteredAnswer:
            if gemini {
                return try json(
                    .ok,
                    ["candidates": [["finishReason": "SAFETY", "index": 0, "safetyRatings": [["category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH"]]]]])
            }
            return try json(
                .ok,
                [
                    "id": "chatcmpl-test", "object": "chat.completion", "model": "vision-test",
                    "choices": [["index": 0, "message": ["role": "assistant", "content": NSNull(), "refusal": NSNull()], "finish_reason": "content_filter"]],
                ])
        case .tokensSpent:
            if gemini {
                return try json(.ok, ["candidates": [["finishReason": "MAX_TOKENS", "index": 0, "content": ["role": "model"]]], "modelVersion": "gemini-test"])
            }
            return try json(
                .ok,
                [
                    "id": "chatcmpl-test", "object": "chat.completion", "model": "vision-test",
                    "choices": [["index": 0, "message": ["role": "assistant", "content": "", "refusal": NSNull()], "finish_reason": "length"]],
                ])
        case .slow, .held:
            return Response(status: .internalServerError)
        }
    }

    /// The request's JSON with every long string (the image) left out, written again: what a check
    /// for words in it reads.
    static func textWithoutImage(_ received: Received) -> String {
        func strip(_ value: Any) -> Any {
            if let text = value as? String { return text.count > 2_000 ? "" : text }
            if let array = value as? [Any] { return array.map(strip) }
            if let object = value as? [String: Any] { return object.mapValues(strip) }
            return value
        }
        let data = try? JSONSerialization.data(withJSONObject: strip(received.json), options: [.sortedKeys])
        return data.map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// The JPEG a request carried: Gemini's `inlineData`, or the Chat Completions data URL.
    static func image(in received: Received) -> [UInt8]? {
        let json = received.json
        var base64: String?
        if let contents = json["contents"] as? [[String: Any]] {
            for part in (contents.first?["parts"] as? [[String: Any]]) ?? [] {
                if let inline = part["inlineData"] as? [String: Any], inline["mimeType"] as? String == "image/jpeg" { base64 = inline["data"] as? String }
            }
        } else if let messages = json["messages"] as? [[String: Any]] {
            for message in messages {
                for part in (message["content"] as? [[String: Any]]) ?? [] where part["type"] as? String == "image_url" {
                    let url = (part["image_url"] as? [String: Any])?["url"] as? String
                    if let url, url.hasPrefix("data:image/jpeg;base64,") { base64 = String(url.dropFirst("data:image/jpeg;base64,".count)) }
                }
            }
        }
        return base64.flatMap { Data(base64Encoded: $0) }.map(Array.init)
    }
}
