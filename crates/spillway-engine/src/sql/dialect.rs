//! The SQL dialect Spillway parses: `sqlparser`'s generic dialect plus the one piece of
//! Flink SQL it lacks, the table argument of a window table-valued function:
//! `TUMBLE(TABLE payments, ...)`, and the session form `SESSION(TABLE payments
//! PARTITION BY card, ...)` (Flink's `SqlWindowTableFunction` operands; see Flink's
//! "Window TVF" docs). No sqlparser dialect parses `TABLE <name>` as an argument, so a
//! prefix parser turns it into `Expr::Prefixed { prefix: TABLE, value }`, with the
//! partition keys as `BinaryOp { op: Custom("PARTITION BY") }` on the right; everything
//! else is the generic dialect's (every `supports_*` it turns on is forwarded, and
//! [`Dialect::dialect`] reports the generic dialect so its parser paths apply).

use std::any::TypeId;

use sqlparser::ast::{BinaryOperator, Expr, Ident};
use sqlparser::dialect::{Dialect, GenericDialect};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// The generic dialect plus Flink's `TABLE <name> [PARTITION BY <keys>]` argument.
#[derive(Debug, Default)]
pub struct FlinkDialect(GenericDialect);

/// The custom operator joining a table argument to its `PARTITION BY` keys.
pub const PARTITION_BY_OP: &str = "PARTITION BY";

macro_rules! forward {
    ($($name:ident),* $(,)?) => {
        $(fn $name(&self) -> bool { self.0.$name() })*
    };
}

impl Dialect for FlinkDialect {
    fn dialect(&self) -> TypeId {
        self.0.dialect()
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        self.0.is_delimited_identifier_start(ch)
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        self.0.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        self.0.is_identifier_part(ch)
    }
    forward!(
        supports_unicode_string_literal,
        supports_group_by_expr,
        supports_group_by_with_modifier,
        supports_left_associative_joins_without_parens,
        supports_connect_by,
        supports_match_recognize,
        supports_pipe_operator,
        supports_start_transaction_modifier,
        supports_window_function_null_treatment_arg,
        supports_dictionary_syntax,
        supports_window_clause_named_window_reference,
        supports_parenthesized_set_variables,
        supports_select_wildcard_except,
        support_map_literal_syntax,
        allow_extract_custom,
        allow_extract_single_quotes,
        supports_create_index_with_clause,
        supports_explain_with_utility_options,
        supports_limit_comma,
        supports_from_first_select,
        supports_projection_trailing_commas,
        supports_asc_desc_in_column_definition,
        supports_try_convert,
        supports_comment_on,
        supports_load_extension,
        supports_named_fn_args_with_assignment_operator,
        supports_struct_literal,
        supports_empty_projections,
        supports_nested_comments,
        supports_user_host_grantee,
        supports_string_escape_constant,
        supports_array_typedef_with_brackets,
        supports_match_against,
        supports_set_names,
        supports_comma_separated_set_assignments,
        supports_filter_during_aggregation,
        supports_select_wildcard_exclude,
        supports_data_type_signed_suffix,
        supports_interval_options,
    );

    fn parse_prefix(&self, p: &mut Parser<'_>) -> Option<Result<Expr, ParserError>> {
        if !p.peek_keyword(Keyword::TABLE) || !matches!(p.peek_nth_token(1).token, Token::Word(_)) {
            return None;
        }
        Some((|| {
            p.expect_keyword_is(Keyword::TABLE)?;
            let mut name = vec![p.parse_identifier()?];
            while p.consume_token(&Token::Period) {
                name.push(p.parse_identifier()?);
            }
            let mut value = Expr::CompoundIdentifier(name);
            if p.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
                let keys = Box::new(p.parse_expr()?);
                value = Expr::BinaryOp {
                    left: Box::new(value),
                    op: BinaryOperator::Custom(PARTITION_BY_OP.into()),
                    right: keys,
                };
            }
            Ok(Expr::Prefixed { prefix: Ident::new("TABLE"), value: Box::new(value) })
        })())
    }
}
