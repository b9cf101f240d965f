//! The `/ui` routes: the page and its files are served with their content
//! types and the security headers, unknown files are 404, and the browser
//! code never turns strings into markup.

use delayd_ui::assets::ASSETS;

async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, delayd_ui::ui_router()).await.unwrap() });
    base
}

#[tokio::test]
async fn page_and_files_have_types_and_csp() {
    let base = serve().await;
    let cases = [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/index.html", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/queue.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ];
    for (path, content_type) in cases {
        let response = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(content_type),
            "{path}: {:?}",
            headers["content-type"]
        );
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert!(!response.text().await.unwrap().is_empty(), "{path}");
    }
}

#[tokio::test]
async fn unknown_files_are_404_with_csp() {
    let base = serve().await;
    // (`/ui/../x` and `/ui/%2e%2e/x` never reach us: URL parsing resolves
    // dot segments first; an encoded slash does reach us.)
    for path in [
        "/ui/nope.js",
        "/ui/..%2fCargo.toml",
        "/ui/app.js/x",
        "/ui/dir/",
    ] {
        let response = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        assert!(
            response.headers().contains_key("content-security-policy"),
            "{path}"
        );
    }
}

#[test]
fn every_module_the_page_imports_is_embedded() {
    for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
        for line in asset.body.lines() {
            let Some(rest) = line.split(" from './").nth(1) else {
                continue;
            };
            let module = rest.split('\'').next().unwrap();
            assert!(
                delayd_ui::assets::asset(module).is_some(),
                "{} imports {module}, which is not embedded",
                asset.path
            );
        }
    }
}

#[test]
fn browser_code_never_parses_strings_as_markup() {
    // The CSP blocks inline scripts, but markup injection could still
    // restyle the page or forge controls: data goes in as text only.
    let forbidden = [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "DOMParser",
        "createContextualFragment",
    ];
    for asset in ASSETS {
        for word in forbidden {
            assert!(!asset.body.contains(word), "{} uses {word}", asset.path);
        }
    }
    let index = delayd_ui::assets::asset("index.html").unwrap().body;
    assert!(!index.contains("<script>"), "no inline script");
    assert!(!index.contains("style="), "no inline style");
}
