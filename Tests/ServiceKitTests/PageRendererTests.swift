import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceKitCore
@testable import ServiceKitPages
import Testing

/// The kit's pages: Mustache escapes what it is given, the one style block is the one the
/// Content-Security-Policy allows, every page has the same headers, and form bodies are read strictly.
@Suite struct PageRendererTests {
    static let greeting = """
        {{<layout}}
        {{$head}}<meta property="og:title" content="{{name}}">{{/head}}
        {{$body}}
        <h1>Hello {{name}}</h1>
        <a href="{{link}}">open</a>
        {{#hint}}
        <p class="hint">{{hint}}</p>
        {{/hint}}
        {{/body}}
        {{/layout}}
        """

    static func renderer(appName: String = "Test <Kitchen>") throws -> PageRenderer {
        try PageRenderer(templates: ["greeting": greeting], settings: PageSettings(appName: appName, accentColor: "#123abc"), expecting: ["greeting"])
    }

    @Test func valuesAreEscaped() throws {
        let pages = try Self.renderer()
        let html = pages.html("greeting", title: "Hi", values: ["name": "<script>alert('x')</script>", "link": "pfa://invite?code=a\"b"])
        #expect(!html.contains("<script>"))
        #expect(html.contains("<h1>Hello &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;</h1>"))
        #expect(html.contains("content=\"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;\""), "the head block is filled and escaped too")
        #expect(html.contains("href=\"pfa://invite?code=a&quot;b\""))
        #expect(html.contains("Test &lt;Kitchen&gt;") && !html.contains("Test <Kitchen>"), "the app's name is escaped")
        #expect(html.contains("<title>Hi · Test &lt;Kitchen&gt;</title>"))
        #expect(html.hasPrefix("<!doctype html>") && html.contains("<meta name=\"viewport\""))
    }

    @Test func aNilValueLeavesItsSectionOut() throws {
        let pages = try Self.renderer()
        let none: String? = nil
        #expect(!pages.html("greeting", title: "Hi", values: ["name": "Sam", "link": "x", "hint": none as Any]).contains("class=\"hint\""))
        let some: String? = "soon"
        #expect(pages.html("greeting", title: "Hi", values: ["name": "Sam", "link": "x", "hint": some as Any]).contains("<p class=\"hint\">soon</p>"))
    }

    @Test func theStyleBlockIsTheOneThePolicyAllows() throws {
        let pages = try Self.renderer()
        let html = pages.html("greeting", title: "Hi", values: ["name": "Sam", "link": "x"])
        let start = try #require(html.range(of: "<style>"))
        let end = try #require(html.range(of: "</style>"))
        let block = String(html[start.upperBound..<end.lowerBound])
        #expect(block == pages.style && block.contains("#123abc"))
        #expect(html.components(separatedBy: "<style>").count == 2, "one style block")
        let hash = Data(SHA256.hash(data: Data(block.utf8))).base64EncodedString()
        let policy = pages.contentSecurityPolicy
        #expect(policy.contains("style-src 'sha256-\(hash)'"))
        for directive in ["default-src 'none'", "img-src 'self'", "form-action 'self'", "base-uri 'none'", "frame-ancestors 'none'"] {
            #expect(policy.contains(directive), "\(directive)")
        }
        #expect(!policy.contains("unsafe") && !policy.contains("script-src"), "no script may run")
        #expect(!html.contains("<script") && !html.contains(" style="), "no inline script or style attribute")
    }

    @Test func everyPageHasTheSameHeaders() throws {
        let pages = try Self.renderer()
        for response in [
            pages.page("greeting", status: .ok, title: "Hi", values: ["name": "Sam", "link": "x"]),
            pages.message(status: .gone, title: "This link has expired", text: "Ask for a new one.", headers: [.retryAfter: "5"]),
            pages.message(for: FormBodyError(status: .contentTooLarge, message: "Too large.")),
        ] {
            #expect(response.headers[.contentType] == "text/html; charset=utf-8")
            #expect(response.headers[.cacheControl] == "no-store")
            #expect(response.headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
            #expect(response.headers[HTTPField.Name("X-Robots-Tag")!] == "noindex")
            #expect(response.headers[.xContentTypeOptions] == "nosniff")
            #expect(response.headers[.contentSecurityPolicy] == pages.contentSecurityPolicy)
        }
        let gone = pages.message(status: .gone, title: "This link has expired", text: "Ask for a new one.", headers: [.retryAfter: "5"])
        #expect(gone.status == .gone && gone.headers[.retryAfter] == "5")
        let message = pages.html("message", title: "This link has expired", values: ["heading": "This link has expired", "text": "Ask <again>."])
        #expect(message.contains("<h1>This link has expired</h1>") && message.contains("Ask &lt;again&gt;."))
    }

    @Test func templatesComeFromTheServicesFolder() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("pages-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try Data(Self.greeting.utf8).write(to: folder.appendingPathComponent("greeting.mustache"))
        try Data("not a template".utf8).write(to: folder.appendingPathComponent("notes.txt"))
        let pages = try PageRenderer(directory: folder, settings: PageSettings(), expecting: ["greeting"])
        #expect(pages.html("greeting", title: "Hi", values: ["name": "Sam", "link": "x"]).contains("<h1>Hello Sam</h1>"))
        #expect(pages.html("notes", title: "Hi").isEmpty)
        #expect(throws: PageTemplateError.self) { try PageRenderer(directory: folder, settings: PageSettings(), expecting: ["invite"]) }
        #expect(throws: PageTemplateError.self) { try PageRenderer(templates: ["broken": "{{#open}}"], settings: PageSettings()) }
        #expect(throws: PageTemplateError.self) { try PageRenderer(templates: [:], settings: PageSettings(accentColor: "red;}</style>")) }
    }

    @Test func theAccentColourIsAHexColour() throws {
        for good in ["#2f7d4f", "#ABC", "#a1B2c3"] { #expect(PageSettings.isHexColor(good), "\(good)") }
        for bad in ["2f7d4f", "#2f7d4", "#ggg", "red", "#123</style>", ""] { #expect(!PageSettings.isHexColor(bad), "\(bad)") }
        var env = EnvironmentReader(["APP_NAME": "Pantry", "PAGE_ACCENT_COLOR": "#fff"])
        let settings = PageSettings(reading: &env)
        #expect(settings == PageSettings(appName: "Pantry", accentColor: "#fff") && env.problems.isEmpty)
        var bad = EnvironmentReader(["PAGE_ACCENT_COLOR": "blue"])
        _ = PageSettings(reading: &bad)
        #expect(bad.problems.contains { $0.hasPrefix("PAGE_ACCENT_COLOR") })
    }

    // MARK: form bodies

    @Test func formFieldsAreDecoded() throws {
        let fields = try FormBody.parse("token=abc-_9&password=salt+%26+pepper%21&disown=1", allowed: ["token", "password", "disown"])
        #expect(fields == ["token": "abc-_9", "password": "salt & pepper!", "disown": "1"])
        #expect(try FormBody.parse("", allowed: ["token"]) == [:])
        #expect(try FormBody.parse("password=", allowed: ["password"]) == ["password": ""])
    }

    @Test func aFormWithFieldsThePageDoesNotHaveIsRefused() throws {
        for text in ["token=a&admin=1", "token=a&token=b", "token[x]=a", "token[]=a", "%ZZ=1"] {
            #expect(throws: FormBodyError.self, "\(text)") { try FormBody.parse(text, allowed: ["token"]) }
        }
        do {
            _ = try FormBody.parse("token=a&admin=1", allowed: ["token"])
            Issue.record("an unknown field was taken")
        } catch let error as FormBodyError {
            #expect(error.status == .badRequest && error.message.contains("admin"))
        }
    }

    @Test func aFormBodyMustBeAFormOfAtMost16KiB() async throws {
        func request(_ body: String, type: String?) -> Request {
            var headers: HTTPFields = [:]
            if let type { headers[.contentType] = type }
            return Request(
                head: HTTPRequest(method: .post, scheme: "http", authority: "pages.test", path: "/verify-email", headerFields: headers),
                body: RequestBody(buffer: ByteBuffer(string: body)))
        }
        let form = "application/x-www-form-urlencoded"
        #expect(try await FormBody.fields(of: request("token=abc", type: form + "; charset=UTF-8"), allowed: ["token"]) == ["token": "abc"])
        await #expect(throws: FormBodyError(status: .unsupportedMediaType, message: "The page expected a form (application/x-www-form-urlencoded).")) {
            try await FormBody.fields(of: request("{\"token\":\"abc\"}", type: "application/json"), allowed: ["token"])
        }
        await #expect(throws: FormBodyError.self) { try await FormBody.fields(of: request("token=abc", type: nil), allowed: ["token"]) }
        let large = "token=" + String(repeating: "a", count: FormBody.maxBytes)
        await #expect(throws: FormBodyError(status: .contentTooLarge, message: "The form is larger than this page takes.")) {
            try await FormBody.fields(of: request(large, type: form), allowed: ["token"])
        }
        let fits = "token=" + String(repeating: "a", count: FormBody.maxBytes - 6)
        #expect(try await FormBody.fields(of: request(fits, type: form), allowed: ["token"])["token"]?.count == FormBody.maxBytes - 6)
    }
}
