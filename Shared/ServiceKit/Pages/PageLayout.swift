/// The templates every service's pages share, kept here rather than as resources of the kit: a
/// library target's resource bundle would have to be found beside each service's executable. A
/// service's own templates (its `Pages` resource folder) fill the layout's blocks:
///
///     {{<layout}}
///     {{$head}}<meta property="og:title" content="{{name}}">{{/head}}
///     {{$body}}<h1>…</h1>{{/body}}
///     {{/layout}}
///
/// Every template is HTML: `{{value}}` is escaped. The only unescaped value is the style block,
/// which is the kit's own text.
enum PageLayout {
    /// The page around every template: a phone-sized column, the app's name, one style block whose
    /// hash the Content-Security-Policy names, no script.
    static let layout = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="referrer" content="no-referrer">
        <title>{{title}} · {{app_name}}</title>
        {{$head}}{{/head}}
        <style>{{{style}}}</style>
        </head>
        <body>
        <main>
        <p class="brand">{{app_name}}</p>
        {{$body}}{{/body}}
        </main>
        </body>
        </html>

        """

    /// A heading and a few words: what happened, or why a link does not work.
    static let message = """
        {{<layout}}
        {{$body}}
        <h1>{{heading}}</h1>
        <p>{{text}}</p>
        {{#hint}}
        <p class="muted">{{hint}}</p>
        {{/hint}}
        {{/body}}
        {{/layout}}

        """

    /// The one style block: system fonts, a column of at most 32rem, light and dark.
    static func style(accent: String) -> String {
        ":root{color-scheme:light dark;--accent:\(accent)}"
            + "*{box-sizing:border-box}"
            + "body{margin:0;font:16px/1.5 -apple-system,BlinkMacSystemFont,\"Segoe UI\",Roboto,Helvetica,Arial,sans-serif;background:#f6f7f5;color:#1d1f1c}"
            + "main{max-width:32rem;margin:0 auto;padding:2rem 1.25rem 3rem}"
            + ".brand{font-weight:600;color:var(--accent);margin:0 0 1.5rem}"
            + "h1{font-size:1.5rem;line-height:1.25;margin:0 0 1rem}"
            + "h2{font-size:1.125rem;margin:2rem 0 .5rem}"
            + "p{margin:0 0 1rem}"
            + "form{margin:0 0 1.5rem}"
            + "label{display:block;font-weight:600;margin:0 0 .25rem}"
            + "input[type=password]{display:block;width:100%;font:inherit;padding:.75rem;border:1px solid #b9bdb5;border-radius:.5rem;margin:0 0 1rem;background:#fff;color:inherit}"
            + "button,.button{display:block;width:100%;font:inherit;font-weight:600;text-align:center;text-decoration:none;padding:.8rem 1rem;border:1px solid var(--accent);"
            + "border-radius:.5rem;background:var(--accent);color:#fff;cursor:pointer;margin:0 0 .75rem}"
            + ".secondary{background:transparent;color:var(--accent)}"
            + ".error{padding:.75rem 1rem;border-radius:.5rem;background:#fdecea;color:#8a1c12}"
            + ".muted{color:#5f645c;font-size:.9rem}"
            + "dl{display:grid;grid-template-columns:1fr auto;gap:.25rem 1rem;margin:0 0 1.5rem}"
            + "dt{color:#5f645c}dd{margin:0;font-weight:600;text-align:right}"
            + "img{display:block;max-width:100%;height:auto;border-radius:.5rem;margin:0 0 1.5rem}"
            + "@media (prefers-color-scheme:dark){body{background:#151714;color:#e8eae5}"
            + "input[type=password]{background:#1f221e;border-color:#4a4f47}.error{background:#3d1a16;color:#ffb4a9}.muted,dt{color:#a3a89f}}"
    }
}
