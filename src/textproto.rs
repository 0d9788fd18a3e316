//! A reader for protobuf text format (the `.pbtxt` files TF Serving is
//! configured with), into a generic field tree.

/// A field value: a scalar token (strings unquoted) or a nested message.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Scalar(String),
    Message(Message),
}

/// Fields in file order; repeated fields appear several times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message(pub Vec<(String, Value)>);

impl Message {
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.0.iter().filter(move |(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn messages<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Message> + 'a {
        self.all(name).filter_map(|v| match v {
            Value::Message(m) => Some(m),
            Value::Scalar(_) => None,
        })
    }

    /// The last occurrence wins, as in protobuf's own parser.
    pub fn message(&self, name: &str) -> Option<&Message> {
        self.0.iter().rev().find_map(|(n, v)| match v {
            Value::Message(m) if n == name => Some(m),
            _ => None,
        })
    }

    pub fn scalar(&self, name: &str) -> Option<&str> {
        self.0.iter().rev().find_map(|(n, v)| match v {
            Value::Scalar(s) if n == name => Some(s.as_str()),
            _ => None,
        })
    }

    pub fn scalars<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.all(name).filter_map(|v| match v {
            Value::Scalar(s) => Some(s.as_str()),
            Value::Message(_) => None,
        })
    }

    pub fn field_names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(char),
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
}

impl Lexer<'_> {
    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            message: message.into(),
        }
    }

    fn next(&mut self) -> Result<Option<Token>, ParseError> {
        loop {
            match self.chars.peek().copied() {
                None => return Ok(None),
                Some('\n') => {
                    self.line += 1;
                    self.chars.next();
                }
                Some(c) if c.is_whitespace() => {
                    self.chars.next();
                }
                Some('#') => {
                    while self.chars.peek().is_some_and(|&c| c != '\n') {
                        self.chars.next();
                    }
                }
                Some(quote @ ('"' | '\'')) => {
                    self.chars.next();
                    return self.string(quote).map(|s| Some(Token::Str(s)));
                }
                Some(c) if c.is_alphanumeric() || matches!(c, '_' | '-' | '+' | '.') => {
                    let mut ident = String::new();
                    while let Some(&c) = self.chars.peek() {
                        if c.is_alphanumeric() || matches!(c, '_' | '-' | '+' | '.' | '/') {
                            ident.push(c);
                            self.chars.next();
                        } else {
                            break;
                        }
                    }
                    return Ok(Some(Token::Ident(ident)));
                }
                Some(c) => {
                    self.chars.next();
                    return Ok(Some(Token::Punct(c)));
                }
            }
        }
    }

    fn string(&mut self, quote: char) -> Result<String, ParseError> {
        let mut out = String::new();
        loop {
            match self.chars.next() {
                None | Some('\n') => return Err(self.error("unterminated string")),
                Some(c) if c == quote => return Ok(out),
                Some('\\') => match self.chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(c) => out.push(c),
                    None => return Err(self.error("unterminated string")),
                },
                Some(c) => out.push(c),
            }
        }
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
    peeked: Option<Token>,
}

impl Parser<'_> {
    fn peek(&mut self) -> Result<Option<&Token>, ParseError> {
        if self.peeked.is_none() {
            self.peeked = self.lexer.next()?;
        }
        Ok(self.peeked.as_ref())
    }

    fn take(&mut self) -> Result<Option<Token>, ParseError> {
        self.peek()?;
        Ok(self.peeked.take())
    }

    fn message(&mut self, close: Option<char>) -> Result<Message, ParseError> {
        let mut fields = Vec::new();
        loop {
            let name = match self.take()? {
                None if close.is_none() => return Ok(Message(fields)),
                None => return Err(self.lexer.error("unexpected end of file: a '}' is missing")),
                Some(Token::Punct(c)) if Some(c) == close => return Ok(Message(fields)),
                Some(Token::Punct(',' | ';')) => continue,
                Some(Token::Ident(name)) => name,
                Some(other) => return Err(self.lexer.error(format!("expected a field name, found {other:?}"))),
            };
            let colon = matches!(self.peek()?, Some(Token::Punct(':')));
            if colon {
                self.take()?;
            }
            match self.take()? {
                Some(Token::Punct('{')) => fields.push((name, Value::Message(self.message(Some('}'))?))),
                Some(Token::Punct('<')) => fields.push((name, Value::Message(self.message(Some('>'))?))),
                Some(Token::Punct('[')) if colon => loop {
                    match self.take()? {
                        Some(Token::Punct(']')) => break,
                        Some(Token::Punct(',')) => continue,
                        Some(Token::Punct('{')) => {
                            fields.push((name.clone(), Value::Message(self.message(Some('}'))?)))
                        }
                        Some(Token::Ident(v)) => fields.push((name.clone(), Value::Scalar(v))),
                        Some(Token::Str(s)) => fields.push((name.clone(), Value::Scalar(self.concat(s)?))),
                        other => return Err(self.lexer.error(format!("bad list element for '{name}': {other:?}"))),
                    }
                },
                Some(Token::Ident(v)) if colon => fields.push((name, Value::Scalar(v))),
                Some(Token::Str(s)) if colon => fields.push((name, Value::Scalar(self.concat(s)?))),
                other => {
                    return Err(self
                        .lexer
                        .error(format!("expected a value for '{name}', found {other:?}")))
                }
            }
        }
    }

    /// Adjacent string literals concatenate, as in C.
    fn concat(&mut self, mut first: String) -> Result<String, ParseError> {
        while let Some(Token::Str(_)) = self.peek()? {
            if let Some(Token::Str(next)) = self.take()? {
                first.push_str(&next);
            }
        }
        Ok(first)
    }
}

pub fn parse(text: &str) -> Result<Message, ParseError> {
    let mut parser = Parser {
        lexer: Lexer {
            chars: text.chars().peekable(),
            line: 1,
        },
        peeked: None,
    };
    parser.message(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_messages_lists_and_comments() {
        let text = r#"
            # a comment
            model_config_list {
              config { name: 'a' base_path: "/m/" 'a' model_version_policy { specific { versions: 1 versions: 2 } } }
              config: < name: "b", base_path: "/b"; versions: [3, 4] >
            }
        "#;
        let root = parse(text).unwrap();
        let list = root.message("model_config_list").unwrap();
        let configs: Vec<&Message> = list.messages("config").collect();
        assert_eq!(configs.len(), 2);
        assert_eq!(configs[0].scalar("base_path"), Some("/m/a"));
        let specific = configs[0]
            .message("model_version_policy")
            .unwrap()
            .message("specific")
            .unwrap();
        assert_eq!(specific.scalars("versions").collect::<Vec<_>>(), vec!["1", "2"]);
        assert_eq!(configs[1].scalars("versions").collect::<Vec<_>>(), vec!["3", "4"]);
    }

    #[test]
    fn reports_the_line_of_an_error() {
        let err = parse("a {\n b: 1\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert_eq!(parse("x: 'unterminated\n").unwrap_err().line, 1);
    }
}
