import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Mustache
import NIOCore
import ServiceKitCore

extension HTTPField.Name {
    package static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
    package static let robotsTag = HTTPField.Name("X-Robots-Tag")!
}

/// A template that does not parse, or one a service needs and did not ship: the service does not start.
package struct PageTemplateError: Error, CustomStringConvertible {
    package var description: String
}

/// The HTML pages a service serves (the links its mails and share links open), rendered with
/// Mustache: every `{{value}}` is escaped, and no HTML is put together in Swift.
///
/// Every page has the same headers: never cached and never indexed (the URL holds a token), no
/// referrer (the token must not reach another site), `nosniff`, and a Content-Security-Policy
/// that allows no script at all, only the one style block (by its hash), images and forms of
/// this origin, and no framing.
public struct PageRenderer: Sendable {
    public let settings: PageSettings
    /// The `Content-Security-Policy` of every page.
    package let contentSecurityPolicy: String
    /// The text of the one style block, which `contentSecurityPolicy` names by its SHA-256.
    package let style: String
    let library: MustacheLibrary

    /// The folder a service ships its templates in: `Services/<Name>/Pages`, copied as a resource.
    public static func bundledDirectory(_ bundle: Bundle) -> URL? {
        bundle.url(forResource: "Pages", withExtension: nil)
    }

    /// Reads every `*.mustache` of `directory`, each named by its file name without the extension.
    /// `expecting` names the templates the service's routes render, so that a missing one stops
    /// the service at start-up instead of failing a request.
    public init(directory: URL?, settings: PageSettings, expecting names: [String] = []) throws {
        var templates: [String: String] = [:]
        if let directory {
            for file in try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil) where file.pathExtension == "mustache" {
                templates[file.deletingPathExtension().lastPathComponent] = try String(contentsOf: file, encoding: .utf8)
            }
        }
        try self.init(templates: templates, settings: settings, expecting: names)
    }

    /// Templates given as text (tests); the kit's `layout` and `message` come with them.
    public init(templates: [String: String], settings: PageSettings, expecting names: [String] = []) throws {
        guard PageSettings.isHexColor(settings.accentColor) else {
            throw PageTemplateError(description: "the accent colour \"\(settings.accentColor)\" is not a hex colour")
        }
        var library = MustacheLibrary()
        let texts: [(String, String)] = [("layout", PageLayout.layout), ("message", PageLayout.message)] + templates.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        for (name, text) in texts {
            do {
                try library.register(text, named: name)
            } catch {
                throw PageTemplateError(description: "the page template \(name) does not parse: \(error)")
            }
        }
        let missing = names.filter { library.getTemplate(named: $0) == nil }
        guard missing.isEmpty else { throw PageTemplateError(description: "page templates missing: \(missing.joined(separator: ", "))") }
        self.library = library
        self.settings = settings
        style = PageLayout.style(accent: settings.accentColor)
        // Hashed once: the block is the same on every page.
        let hash = Data(SHA256.hash(data: Data(style.utf8))).base64EncodedString()
        contentSecurityPolicy =
            "default-src 'none'; style-src 'sha256-\(hash)'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    }

    /// The page `template` renders from `values`, with `title` (the browser's tab) and the app's name.
    /// A value left `nil` is left out, so `{{#value}}…{{/value}}` shows nothing for it.
    public func page(_ template: String, status: HTTPResponse.Status = .ok, title: String, values: [String: Any] = [:], headers: HTTPFields = [:]) -> Response {
        Response(status: status, headers: self.headers(headers), body: .init(byteBuffer: ByteBuffer(string: html(template, title: title, values: values))))
    }

    /// The HTML of `page(_:status:title:values:headers:)`.
    public func html(_ template: String, title: String, values: [String: Any] = [:]) -> String {
        var context: [String: Any] = [:]
        for (key, value) in values {
            if let present = Self.unwrapped(value) { context[key] = present }
        }
        context["title"] = title
        context["app_name"] = settings.appName
        context["style"] = style
        // `expecting` at start-up keeps a template from being missing here.
        return library.render(context, withTemplate: template) ?? ""
    }

    /// A heading and a few words: what happened, or why a link does not work.
    public func message(status: HTTPResponse.Status, title: String, heading: String? = nil, text: String, hint: String? = nil, headers: HTTPFields = [:]) -> Response {
        page("message", status: status, title: title, values: ["heading": heading ?? title, "text": text, "hint": hint as Any], headers: headers)
    }

    /// The page for a form body the page cannot read (too large, not a form, a field it does not have).
    public func message(for error: FormBodyError) -> Response {
        message(status: error.status, title: "Something went wrong", text: error.message, hint: "Go back, and try the link from the mail again.")
    }

    /// The headers of every page, beside `extra` (`Retry-After`, say).
    public func headers(_ extra: HTTPFields = [:]) -> HTTPFields {
        var headers = extra
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        headers[.referrerPolicy] = "no-referrer"
        headers[.robotsTag] = "noindex"
        headers[.xContentTypeOptions] = "nosniff"
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        return headers
    }

    /// `value` without an `Optional` around it, nil when it is one that holds nothing: Mustache
    /// would take a dictionary's `Optional.none` for a value and show its section.
    static func unwrapped(_ value: Any) -> Any? {
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return mirror.children.first.map(\.value)
    }
}
